"""Experiment trackers beside TensorBoard and metrics.jsonl: MLflow and Weights & Biases (``trainer.loggers``), as
transformers' ``report_to`` and Lightning's loggers offer them.

A run's trackers start before any data or model work (``start_trackers``, from ``cli.start_run``), on rank 0 only:
a tracker that is not installed, or that cannot start (no W&B login, an unreachable MLflow server), stops the command
there with one line. Once started, each gets the resolved config and the run directory, then every metrics record
the Trainer writes (training and evaluation). A tracker that fails in the middle of a run is dropped with a warning:
the run goes on, metrics.jsonl keeps every record. The trackers' run ids are kept in ``<run dir>/trackers.json`` so
that a resumed run continues the same MLflow and W&B runs.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import netrc
import os
from pathlib import Path
from urllib.parse import urlparse

from plm_toolkit.core.errors import ConfigError

log = logging.getLogger("plm_toolkit")

# What trainer.loggers accepts; tensorboard and jsonl are MetricsWriter's own.
LOGGERS = ("tensorboard", "jsonl", "mlflow", "wandb")
# A tracker's package and the extra that installs it.
PACKAGES = {"mlflow": ("mlflow", "mlflow"), "wandb": ("wandb", "wandb")}
IDS_FILE = "trackers.json"
# Trackers started for a run directory, until the run's MetricsWriter takes them.
_started: dict[Path, list] = {}


def chosen_loggers(trainer_cfg) -> list[str]:
    """trainer.loggers, checked; trainer.tensorboard=false takes tensorboard out."""
    names = [str(name) for name in trainer_cfg.get("loggers", ["tensorboard", "jsonl"])]
    unknown = [name for name in names if name not in LOGGERS]
    if unknown:
        raise ConfigError(f"trainer.loggers: unknown {', '.join(unknown)}; valid: {', '.join(LOGGERS)} (any subset)")
    if not trainer_cfg.get("tensorboard", True):
        names = [name for name in names if name != "tensorboard"]
    return names


def flatten(tree, prefix: str = "") -> dict:
    if isinstance(tree, dict):
        out = {}
        for key, value in tree.items():
            out |= flatten(value, f"{prefix}{key}.")
        return out
    return {prefix[:-1]: tree}


class MlflowTracker:
    name = "mlflow"

    def __init__(self, run_dir: Path, config: dict, run_id: str | None):
        import mlflow

        self.mlflow = mlflow
        if not os.environ.get("MLFLOW_TRACKING_URI"):
            mlflow.set_tracking_uri(Path("mlruns").resolve().as_uri())
        if mlflow.get_tracking_uri().startswith("file:"):
            # MLflow 3 refuses its local file store unless asked; a local folder is what a run without a server wants.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        mlflow.set_experiment(os.environ.get("MLFLOW_EXPERIMENT_NAME", "plm_toolkit"))
        self.run = mlflow.start_run(run_id=run_id, run_name=None if run_id else run_dir.name)
        self.id = self.run.info.run_id
        if run_id is None:
            params = {key: str(value)[:500] for key, value in flatten(config).items()}
            items = sorted(params.items())
            for start in range(0, len(items), 100):  # MLflow takes at most 100 parameters a call
                mlflow.log_params(dict(items[start : start + 100]))
            mlflow.log_dict(config, "config.json")
        mlflow.set_tag("run_dir", str(run_dir.resolve()))

    def log(self, record: dict) -> None:
        values = {key.replace("/", "_"): float(value) for key, value in numeric(record).items()}
        self.mlflow.log_metrics(values, step=int(record["step"]))

    def close(self) -> None:
        self.mlflow.end_run()


class WandbTracker:
    name = "wandb"

    def __init__(self, run_dir: Path, config: dict, run_id: str | None):
        import wandb

        offline = os.environ.get("WANDB_MODE", "") in ("offline", "disabled", "dryrun")
        if not offline and not wandb_logged_in():
            raise RuntimeError("no W&B login (run wandb login, or set WANDB_MODE=offline to log to ./wandb)")
        self.wandb = wandb
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "plm_toolkit"),
            name=run_dir.name,
            id=run_id,
            resume="allow" if run_id else None,
            config=config,
            dir=os.environ.get("WANDB_DIR") or None,
        )
        self.run.summary["run_dir"] = str(run_dir.resolve())
        self.id = self.run.id

    def log(self, record: dict) -> None:
        self.run.log(numeric(record), step=int(record["step"]))

    def close(self) -> None:
        self.run.finish()


def wandb_logged_in() -> bool:
    """An API key in WANDB_API_KEY or in the netrc file wandb login writes: without one, wandb.init would prompt."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
    try:
        return netrc.netrc(os.environ.get("NETRC") or None).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


TRACKERS = {"mlflow": MlflowTracker, "wandb": WandbTracker}


def numeric(record: dict) -> dict:
    return {
        key: value
        for key, value in record.items()
        if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    }


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
    ids_path = run_dir / IDS_FILE
    ids = json.loads(ids_path.read_text()) if ids_path.is_file() else {}
    started = []
    for name in names:
        try:
            started.append(TRACKERS[name](run_dir, config, ids.get(name)))
        except Exception as err:  # noqa: BLE001  (any failure of a tracker's start is the user's line)
            for tracker in started:
                tracker.close()
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ConfigError(
                f"trainer.loggers: {name} could not start ({reason}); or leave it out of trainer.loggers"
            ) from None
    run_dir.mkdir(parents=True, exist_ok=True)
    ids |= {tracker.name: tracker.id for tracker in started}
    tmp = ids_path.with_name(f".{IDS_FILE}.tmp")
    tmp.write_text(json.dumps(ids, indent=2) + "\n")
    tmp.replace(ids_path)
    log.info("trackers: %s", ", ".join(f"{t.name} (run {t.id})" for t in started))
    _started[run_dir.resolve()] = started


def take_trackers(run_dir: Path) -> list:
    """The trackers started for ``run_dir`` (the MetricsWriter that takes them closes them)."""
    return _started.pop(run_dir.resolve(), [])


def close_trackers(run_dir: Path) -> None:
    """Close trackers a run started and never handed over (it stopped before its loop)."""
    for tracker in _started.pop(run_dir.resolve(), []):
        tracker.close()


class Trackers:
    """The started trackers as one: a failure in the middle of a run drops that tracker with a warning."""

    def __init__(self, trackers: list):
        self.trackers = list(trackers)

    def log(self, record: dict) -> None:
        for tracker in list(self.trackers):
            try:
                tracker.log(record)
            except Exception as err:  # noqa: BLE001  (a tracker never costs the run)
                log.warning(
                    "%s failed (%s); it is dropped for the rest of the run, metrics.jsonl goes on", tracker.name, err
                )
                self.trackers.remove(tracker)

    def close(self) -> None:
        for tracker in self.trackers:
            try:
                tracker.close()
            except Exception as err:  # noqa: BLE001
                log.warning("%s failed to close (%s)", tracker.name, err)
        self.trackers = []
