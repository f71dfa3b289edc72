"""Experiment trackers beside TensorBoard and metrics.jsonl: MLflow and Weights & Biases (``trainer.loggers``), as
transformers' ``report_to`` and Lightning's loggers offer them (``training/tracker_backends.py``).

A run's trackers start before any data or model work (``start_trackers``, from ``commands/fitting.start_run``), on
rank 0 only, each within a time limit: a tracker that is not installed, or that cannot start (no W&B login, an MLflow
server that refuses the connection or does not answer within seconds) stops the command there with one line naming
where it logs and what to do. Once started, each gets the resolved config and the run directory, then every metrics
record the Trainer writes (training and evaluation), on a thread of its own: the training thread only hands a record
over, so a tracker that is slow or stops answering never slows the training. A tracker that fails in the middle of a
run is dropped with one warning: the run goes on, metrics.jsonl keeps every record; at the end of the run the
trackers get a few seconds to take what is left. The trackers' run ids are kept in ``<run dir>/trackers.json`` so that
a resumed run continues the same MLflow and W&B runs.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import queue
import re
import threading
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from plm_toolkit.core.atomic import write_text
from plm_toolkit.core.errors import ConfigError
from plm_toolkit.training.tracker_backends import (
    LOCAL_START_SECONDS,
    PACKAGES,
    REMOTE_START_SECONDS,
    REQUEST_SECONDS,
    TRACKERS,
    TrackerError,
)

log = logging.getLogger("plm_toolkit")

# What trainer.loggers accepts; tensorboard and jsonl are MetricsWriter's own.
LOGGERS = ("tensorboard", "jsonl", "mlflow", "wandb")
IDS_FILE = "trackers.json"
# How long the end of a run waits for the trackers to take the records they have not yet taken and to end their runs.
CLOSE_SECONDS = 10.0
# The name of the trackers' threads.
THREAD = "trackers"
# Trackers started for a run directory, until the run's MetricsWriter takes them.
_started: dict[Path, list] = {}


class QuietRetries(logging.Filter):
    """urllib3's line for each retry of a tracker's request (MLflow retries 7 times) is left out: the run says once
    that a tracker failed."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.threadName.startswith(THREAD)


_quiet = QuietRetries()


def chosen_loggers(trainer_cfg) -> list[str]:
    """trainer.loggers, checked; trainer.tensorboard=false takes tensorboard out."""
    names = [str(name) for name in trainer_cfg.get("loggers", ["tensorboard", "jsonl"])]
    unknown = [name for name in names if name not in LOGGERS]
    if unknown:
        raise ConfigError(f"trainer.loggers: unknown {', '.join(unknown)}; valid: {', '.join(LOGGERS)} (any subset)")
    if not trainer_cfg.get("tensorboard", True):
        names = [name for name in names if name != "tensorboard"]
    return names


class TimedOut(Exception):
    pass


def within(seconds: float, work: Callable[[], object]) -> object:
    """``work()``'s result, or TimedOut once ``seconds`` pass (the work goes on on a daemon thread, which the process
    does not wait for); ``work``'s exception is raised here."""
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["value"] = work()
        except BaseException as err:  # noqa: BLE001  (raised again on the caller's thread)
            outcome["error"] = err

    thread = threading.Thread(target=run, name=f"{THREAD}-start", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise TimedOut
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


@contextmanager
def bounded_requests():
    """MLflow's HTTP requests while a tracker starts: REQUEST_SECONDS each, no retries (MLflow's defaults, 120 s and
    7 retries with back-off, held a run for minutes before its first step); a value the user set is kept."""
    mine = {"MLFLOW_HTTP_REQUEST_TIMEOUT": str(REQUEST_SECONDS), "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"}
    mine = {key: value for key, value in mine.items() if key not in os.environ}
    os.environ.update(mine)
    try:
        yield
    finally:
        for key in mine:
            os.environ.pop(key, None)


# What a failed connection's long message says, in a few words.
REASONS = (
    (re.compile(r"connection refused|NewConnectionError", re.I), "connection refused"),
    (re.compile(r"timed? ?out|ReadTimeout|ConnectTimeout", re.I), f"no answer within {REQUEST_SECONDS} s"),
    (re.compile(r"name or service not known|nodename nor servname|name resolution|getaddrinfo", re.I), "unknown host"),
)


def short_reason(err: BaseException) -> str:
    text = str(err).strip()
    for pattern, reason in REASONS:
        if pattern.search(text):
            return reason
    first = text.splitlines()[0] if text else type(err).__name__
    return first if len(first) <= 200 else first[:197] + "..."


# What to do about a tracker's server that cannot be reached.
ADVICE = {
    "mlflow": "start the server, or set MLFLOW_TRACKING_URI to one that answers (or to sqlite:///mlflow.db)",
    "wandb": "check the network or WANDB_BASE_URL, or set WANDB_MODE=offline to log to ./wandb",
}


def start_one(name: str, run_dir: Path, config: dict, run_id: str | None):
    """Start tracker ``name`` within its time limit, or ConfigError: one line naming where it logs and what to do."""
    backend = TRACKERS[name]
    leave_out = f"or leave {name} out of trainer.loggers"
    try:
        target = backend.target()
    except TrackerError as err:
        raise ConfigError(f"trainer.loggers: {name} cannot log here: {err}; {leave_out}") from None
    remote = backend.remote(target)
    seconds = REMOTE_START_SECONDS if remote else LOCAL_START_SECONDS
    answer = f"{ADVICE[name]}, {leave_out}" if remote else leave_out
    try:
        with bounded_requests():
            tracker = within(seconds, lambda: backend(run_dir, config, run_id, target))
    except TimedOut:
        raise ConfigError(
            f"trainer.loggers: {name} could not start: {target} did not answer within {seconds:g} s; {answer}"
        ) from None
    except TrackerError as err:
        raise ConfigError(f"trainer.loggers: {name} could not start ({err}); {leave_out}") from None
    except Exception as err:  # noqa: BLE001  (any failure of a tracker's start is the user's line)
        raise ConfigError(
            f"trainer.loggers: {name} could not start at {target} ({short_reason(err)}); {answer}"
        ) from None
    tracker.target = target
    return tracker


def start_trackers(trainer_cfg, run_dir: Path, config: dict, is_main: bool) -> None:
    """Start the run's MLflow / W&B trackers (rank 0), or stop here with one line naming trainer.loggers."""
    names = [name for name in chosen_loggers(trainer_cfg) if name in TRACKERS]
    for name in names:
        module, extra = PACKAGES[name]
        if importlib.util.find_spec(module) is None:
            raise ConfigError(f"trainer.loggers: {name} is not installed: pip install 'plm_toolkit[{extra}]'")
    close_trackers(run_dir)
    if not is_main or not names:
        return
    if _quiet not in logging.getLogger("urllib3.connectionpool").filters:
        logging.getLogger("urllib3.connectionpool").addFilter(_quiet)
    ids_path = run_dir / IDS_FILE
    ids = json.loads(ids_path.read_text()) if ids_path.is_file() else {}
    started = []
    for name in names:
        try:
            started.append(start_one(name, run_dir, config, ids.get(name)))
        except ConfigError:
            Trackers(started).close()
            raise
    run_dir.mkdir(parents=True, exist_ok=True)
    ids |= {tracker.name: tracker.id for tracker in started}
    write_text(ids_path, json.dumps(ids, indent=2) + "\n")
    log.info("trackers: %s", ", ".join(f"{described(t)}: run {t.id}" for t in started))
    _started[run_dir.resolve()] = started


def take_trackers(run_dir: Path) -> Trackers:
    """The trackers started for ``run_dir``, as one (whoever takes them closes them: the run's MetricsWriter)."""
    return Trackers(_started.pop(run_dir.resolve(), []))


def close_trackers(run_dir: Path) -> None:
    """Close trackers a run started and never handed over (it stopped before its loop)."""
    take_trackers(run_dir).close()


def described(tracker) -> str:
    """A tracker and where it logs: ``mlflow (http://mlflow:5000)``."""
    target = getattr(tracker, "target", None)
    return f"{tracker.name} ({target})" if target else tracker.name


class Trackers:
    """The started trackers as one, fed from a thread of their own: ``log`` only queues the record. A tracker that
    fails is dropped with one warning; ``close`` waits at most ``close_seconds`` for the records still queued and for
    the trackers to end their runs, then goes on without them."""

    def __init__(self, trackers: list, close_seconds: float = CLOSE_SECONDS):
        self.trackers = list(trackers)
        self.close_seconds = close_seconds
        self.records: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = None
        if self.trackers:
            self.thread = threading.Thread(target=self.work, name=THREAD, daemon=True)
            self.thread.start()

    def log(self, record: dict) -> None:
        if self.thread is not None:
            self.records.put(dict(record))

    def work(self) -> None:
        while (record := self.records.get()) is not None:
            for tracker in list(self.trackers):
                try:
                    tracker.log(record)
                except Exception as err:  # noqa: BLE001  (a tracker never costs the run)
                    self.trackers.remove(tracker)
                    log.warning(
                        "%s failed at step %s (%s); it is dropped for the rest of the run, metrics.jsonl goes on",
                        described(tracker), record.get("step"), short_reason(err),
                    )  # fmt: skip
        for tracker in self.trackers:
            try:
                tracker.close()
            except Exception as err:  # noqa: BLE001
                log.warning("%s failed to end its run (%s)", described(tracker), short_reason(err))

    def close(self) -> None:
        if self.thread is None:
            return
        self.records.put(None)
        self.thread.join(self.close_seconds)
        if self.thread.is_alive():
            names = ", ".join(described(tracker) for tracker in self.trackers)
            waiting = max(self.records.qsize() - 1, 0)  # the end-of-run marker is not a record
            log.warning(
                "%s did not take the run's last records (%d still queued) and end its run within %g s; the run ends "
                "without it (metrics.jsonl holds every record)", names, waiting, self.close_seconds,
            )  # fmt: skip
        self.thread = None
