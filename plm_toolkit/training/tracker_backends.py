"""The trackers ``trainer.loggers`` may name beside TensorBoard and metrics.jsonl: MLflow (any tracking URI: its local
file store, a SQL database such as ``sqlite:///mlflow.db``, an ``http(s)://`` server) and Weights & Biases.

Each starts (``__init__``: the run created or continued, the config and the run directory recorded), logs a metrics
record (``log``) and ends its run (``close``). None of them is called on the training thread once the run trains:
``training/trackers.py`` starts them within a time limit and runs their logging on a thread of its own.

MLflow is driven through ``MlflowClient`` with the run's id, never through ``mlflow.start_run``: the fluent API keeps
its active run per thread and ends it at exit, where a tracking server that stopped answering would hold the process.
"""

from __future__ import annotations

import importlib.util
import math
import netrc
import os
import time
from pathlib import Path
from urllib.parse import urlparse

# MLflow's SQL stores (its DATABASE_ENGINES): what ``sqlite:///mlflow.db`` and its siblings need beyond mlflow-skinny.
SQL_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")
# MLflow takes at most 100 parameters a call.
PARAMETERS_PER_CALL = 100
# How long a tracker may take to start: one reached over the network (each of its requests then waits at most
# REQUEST_SECONDS, without retries), and one that writes local files (a new SQLite database runs MLflow's schema
# migrations: 13 s measured on a loaded 2-core machine).
REMOTE_START_SECONDS = 20.0
LOCAL_START_SECONDS = 120.0
REQUEST_SECONDS = 5


class TrackerError(RuntimeError):
    """A tracker that cannot start, with what to do: its message is the user's line."""


def flatten(tree, prefix: str = "") -> dict:
    if isinstance(tree, dict):
        out = {}
        for key, value in tree.items():
            out |= flatten(value, f"{prefix}{key}.")
        return out
    return {prefix[:-1]: tree}


def numeric(record: dict) -> dict:
    return {
        key: value
        for key, value in record.items()
        if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    }


def mlflow_uri() -> str:
    """The tracking URI a run logs to: MLFLOW_TRACKING_URI, else what MLflow 3 chooses by default, whatever the
    installed version: the file store ./mlruns where that already holds runs, else the database ./mlflow.db."""
    given = os.environ.get("MLFLOW_TRACKING_URI")
    if given:
        return given
    if any(Path("mlruns").glob("*/meta.yaml")):
        return Path("mlruns").resolve().as_uri()
    return f"sqlite:///{Path('mlflow.db').resolve()}"


def remote_uri(uri: str) -> bool:
    """Whether ``uri`` is reached over the network (an answer may never come), not a file or a database file."""
    return urlparse(uri).scheme not in ("", "file", "sqlite")


def check_mlflow_uri(uri: str) -> None:
    """TrackerError for a URI this installation cannot log to, before anything is contacted."""
    scheme = urlparse(uri).scheme.split("+")[0]
    if scheme in SQL_SCHEMES and importlib.util.find_spec("sqlalchemy") is None:
        raise TrackerError(
            f"MLFLOW_TRACKING_URI={uri} is a database, which MLflow reaches through SQLAlchemy, and SQLAlchemy is not "
            "installed: pip install 'plm_toolkit[mlflow]'"
        )


class MlflowTracker:
    name = "mlflow"

    @staticmethod
    def target() -> str:
        uri = mlflow_uri()
        check_mlflow_uri(uri)
        return uri

    @staticmethod
    def remote(target: str) -> bool:
        return remote_uri(target)

    def __init__(self, run_dir: Path, config: dict, run_id: str | None, uri: str):
        from mlflow.entities import Param
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        if urlparse(uri).scheme == "file":
            # MLflow 3 refuses its file store unless asked; a run that names that store wants it.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        database = urlparse(uri)
        if database.scheme == "sqlite" and database.path not in ("", "/", "/:memory:"):
            # sqlite:///runs/mlflow.db: SQLite creates the file, not the folder it is in.
            Path(database.path[1:]).parent.mkdir(parents=True, exist_ok=True)
        self.uri = uri
        self.client = MlflowClient(tracking_uri=uri)
        if run_id is not None:
            try:
                self.client.update_run(run_id, status="RUNNING")
            except MlflowException:
                run_id = None  # trackers.json names a run this store does not hold (another MLFLOW_TRACKING_URI)
        if run_id is None:
            experiment = self.experiment(os.environ.get("MLFLOW_EXPERIMENT_NAME", "plm_toolkit"))
            run = self.client.create_run(experiment, run_name=run_dir.name)
            run_id = run.info.run_id
            items = sorted((key, str(value)[:500]) for key, value in flatten(config).items())
            for start in range(0, len(items), PARAMETERS_PER_CALL):
                params = [Param(key, value) for key, value in items[start : start + PARAMETERS_PER_CALL]]
                self.client.log_batch(run_id, params=params)
            self.client.log_dict(run_id, config, "config.json")
        self.client.set_tag(run_id, "run_dir", str(run_dir.resolve()))
        self.id = run_id

    def experiment(self, name: str) -> str:
        found = self.client.get_experiment_by_name(name)
        if found is None:
            return self.client.create_experiment(name)
        if found.lifecycle_stage == "deleted":
            raise TrackerError(
                f"the MLflow experiment {name!r} at {self.uri} is deleted: restore it (mlflow experiments restore "
                f"--experiment-id {found.experiment_id}) or set MLFLOW_EXPERIMENT_NAME to another name"
            )
        return found.experiment_id

    def log(self, record: dict) -> None:
        from mlflow.entities import Metric

        now, step = int(time.time() * 1000), int(record["step"])
        metrics = [Metric(key.replace("/", "_"), float(value), now, step) for key, value in numeric(record).items()]
        if metrics:
            self.client.log_batch(self.id, metrics=metrics)

    def close(self) -> None:
        self.client.set_terminated(self.id)


class WandbTracker:
    name = "wandb"

    @staticmethod
    def target() -> str:
        if offline():
            return f"{os.environ.get('WANDB_DIR') or '.'}/wandb (WANDB_MODE={os.environ['WANDB_MODE']})"
        return os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")

    @staticmethod
    def remote(target: str) -> bool:
        return not offline()

    def __init__(self, run_dir: Path, config: dict, run_id: str | None, target: str):
        import wandb

        if not offline() and not wandb_logged_in():
            raise TrackerError("no W&B login (run wandb login, or set WANDB_MODE=offline to log to ./wandb)")
        self.wandb = wandb
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "plm_toolkit"),
            name=run_dir.name,
            id=run_id,
            resume="allow" if run_id else None,
            config=config,
            dir=os.environ.get("WANDB_DIR") or None,
            settings=wandb.Settings(init_timeout=REMOTE_START_SECONDS),
        )
        self.run.summary["run_dir"] = str(run_dir.resolve())
        self.id = self.run.id

    def log(self, record: dict) -> None:
        self.run.log(numeric(record), step=int(record["step"]))

    def close(self) -> None:
        self.run.finish()


def offline() -> bool:
    return os.environ.get("WANDB_MODE", "") in ("offline", "disabled", "dryrun")


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
# A tracker's package and the extra that installs it.
PACKAGES = {"mlflow": ("mlflow", "mlflow"), "wandb": ("wandb", "wandb")}
