"""trainer.loggers: MLflow (its file store, a SQLite database, a local tracking server) and Weights & Biases (offline
mode) get the resolved config, every metric (evaluation included) and the run directory through the real command
line, read back by MLflow's own client; a tracker that fails or stops answering in the middle of a run costs the
training nothing; a server that refuses or never answers stops the start within seconds. A tracker that is missing
or cannot start, through the command line: tests/bad_inputs/test_bad_inputs_trackers.py."""

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from plm_toolkit.training.trackers import Trackers, chosen_loggers
from tests.training.conftest import TINY


def plm_train(
    tmp_path: Path, *overrides: str, env: dict | None = None, python: str = ""
) -> subprocess.CompletedProcess:
    code = (
        f"import sys; {python}from plm_toolkit.commands.train import main; "
        "sys.argv = ['plm-train', *sys.argv[1:]]; main()"
    )
    environment = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", code, *overrides],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )


def corpus(tmp_path: Path) -> list[str]:
    from plm_toolkit.core.resources import resource_path

    docs = Path(resource_path("corpora/wikitext2/train.txt")).read_text().split("\n\n")
    (tmp_path / "train.txt").write_text("\n\n".join(docs[:20])[:40000])
    (tmp_path / "valid.txt").write_text("\n\n".join(docs[20:24])[:6000])
    return [
        "data=text_files",
        f"data.train_files=[{tmp_path / 'train.txt'}]",
        f"data.validation_files=[{tmp_path / 'valid.txt'}]",
    ]


def read_back(uri: str, run_dir: Path, steps: list[int], evaluations: list[int]) -> str:
    """The MLflow run of ``run_dir`` read by MLflow's own client from ``uri``: finished, with the config as parameters
    and config.json, the run directory as a tag, every training and evaluation step. Returns its id."""
    from mlflow.tracking import MlflowClient

    run_id = json.loads((run_dir / "trackers.json").read_text())["mlflow"]
    client = MlflowClient(tracking_uri=uri)
    found = client.get_run(run_id)
    assert found.info.status == "FINISHED" and found.info.run_name == run_dir.name
    assert found.data.tags["run_dir"] == str(run_dir.resolve())
    assert found.data.params["model.hidden_size"] == "36" and found.data.params["trainer.max_steps"] == "4"
    assert [m.step for m in client.get_metric_history(run_id, "loss")] == steps
    assert [m.step for m in client.get_metric_history(run_id, "eval_loss")] == evaluations
    assert [a.path for a in client.list_artifacts(run_id)] == ["config.json"]
    return run_id


TRACKED = [*TINY, "trainer.max_steps=4", "trainer.eval_every=2", "trainer.eval_batches=2"]


@pytest.mark.slow
def test_mlflow_file_store_and_wandb_get_config_metrics_and_run_directory(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    pytest.importorskip("wandb")
    store = tmp_path / "mlruns"
    env = {"MLFLOW_TRACKING_URI": store.as_uri(), "WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path)}
    run_dir = tmp_path / "run"
    overrides = [*TRACKED, *corpus(tmp_path), "trainer.loggers=[jsonl,mlflow,wandb]", f"hydra.run.dir={run_dir}"]
    done = plm_train(tmp_path, *overrides, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not (run_dir / "tensorboard").exists() and (run_dir / "metrics.jsonl").is_file()

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    read_back(store.as_uri(), run_dir, [1, 2, 3, 4], [2, 4])
    wandb_id = json.loads((run_dir / "trackers.json").read_text())["wandb"]
    offline = list(tmp_path.glob("wandb/offline-run-*"))
    assert len(offline) == 1 and wandb_id in offline[0].name
    # The offline run's records (protobuf in a LevelDB-style log, what wandb sync uploads) hold the config, the
    # evaluation metrics and the run directory.
    records = next(offline[0].glob("*.wandb")).read_bytes()
    for expected in (b"hidden_size", b"eval_loss", b"tokens_per_s", b"run_dir", str(run_dir.resolve()).encode()):
        assert expected in records, expected


@pytest.mark.slow
def test_mlflow_sqlite_store_logs_a_run_and_a_resume_continues_it(tmp_path):
    """MLflow's recommended local backend, in a folder that does not exist yet: the run, then its resume to step 6,
    are one MLflow run."""
    pytest.importorskip("mlflow")
    pytest.importorskip("sqlalchemy", reason="sqlite:/// needs SQLAlchemy: pip install -e '.[mlflow]'")
    uri = "sqlite:///tracking/mlflow.db"
    run_dir = tmp_path / "run"
    overrides = [*TRACKED, *corpus(tmp_path), "trainer.loggers=[jsonl,mlflow]", f"hydra.run.dir={run_dir}"]
    done = plm_train(tmp_path, *overrides, env={"MLFLOW_TRACKING_URI": uri})
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "tracking" / "mlflow.db").is_file()
    first = read_back(f"sqlite:///{tmp_path}/tracking/mlflow.db", run_dir, [1, 2, 3, 4], [2, 4])

    done = plm_train(tmp_path, *overrides, "trainer.max_steps=6", env={"MLFLOW_TRACKING_URI": uri})
    assert done.returncode == 0, done.stderr[-3000:]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/tracking/mlflow.db")
    assert json.loads((run_dir / "trackers.json").read_text())["mlflow"] == first
    assert [m.step for m in client.get_metric_history(first, "loss")] == [1, 2, 3, 4, 5, 6]
    assert client.get_run(first).info.status == "FINISHED"


def mlflow_server_command() -> list[str] | None:
    """``mlflow server`` from this environment (the full mlflow package: the server needs Flask), else from the
    executable PLM_TOOLKIT_MLFLOW_SERVER names (an mlflow installed apart, e.g. in a virtual environment of its own)."""
    if importlib.util.find_spec("flask") is not None and importlib.util.find_spec("mlflow") is not None:
        return [sys.executable, "-m", "mlflow", "server"]
    given = os.environ.get("PLM_TOOLKIT_MLFLOW_SERVER")
    return [given, "server"] if given else None


@pytest.mark.slow
def test_mlflow_tracking_server_logs_a_run(tmp_path):
    """A local ``mlflow server`` (offline, on a free port, its own SQLite database): the run logs over HTTP."""
    pytest.importorskip("mlflow")
    command = mlflow_server_command()
    if command is None:
        pytest.skip("no mlflow server here: it needs the full mlflow package (or PLM_TOOLKIT_MLFLOW_SERVER=PATH)")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server_dir = tmp_path / "server"
    server_dir.mkdir()
    server = subprocess.Popen(
        [*command, "--backend-store-uri", f"sqlite:///{server_dir}/server.db", "--host", "127.0.0.1", "--port",
         str(port), "--workers", "1"],
        cwd=server_dir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while not answers(f"{uri}/health"):
            assert server.poll() is None and time.monotonic() < deadline, "mlflow server did not start"
            time.sleep(1)
        run_dir = tmp_path / "run"
        overrides = [*TRACKED, *corpus(tmp_path), "trainer.loggers=[jsonl,mlflow]", f"hydra.run.dir={run_dir}"]
        done = plm_train(tmp_path, *overrides, env={"MLFLOW_TRACKING_URI": uri})
        assert done.returncode == 0, done.stderr[-3000:]
        read_back(uri, run_dir, [1, 2, 3, 4], [2, 4])
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the server and the uvicorn workers it started
        server.wait(30)


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def test_loggers_are_checked_and_a_failing_tracker_never_costs_the_run(caplog):
    from omegaconf import OmegaConf

    assert chosen_loggers(OmegaConf.create({"loggers": ["tensorboard", "jsonl"], "tensorboard": False})) == ["jsonl"]
    with pytest.raises(Exception, match="trainer.loggers: unknown comet; valid: tensorboard, jsonl, mlflow, wandb"):
        chosen_loggers(OmegaConf.create({"loggers": ["comet"]}))

    class Broken:
        name = "broken"
        closed = False

        def log(self, record):
            raise OSError("disk full")

        def close(self):
            type(self).closed = True

    class Counting(Broken):
        name = "counting"
        steps: list = []

        def log(self, record):
            Counting.steps.append(record["step"])

    trackers = Trackers([Broken(), Counting()])
    for step in (1, 2, 3):
        trackers.log({"step": step, "loss": 1.0 / step})
    trackers.close()
    assert Counting.steps == [1, 2, 3] and Counting.closed and not Broken.closed
    assert [t.name for t in trackers.trackers] == ["counting"]
    failures = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert failures == [
        "broken failed at step 1 (disk full); it is dropped for the rest of the run, metrics.jsonl goes on"
    ]


def test_a_tracker_that_stops_answering_never_slows_the_training(caplog):
    """Records are handed to the trackers' thread: 200 records from the training thread take milliseconds while the
    tracker is stuck in its first call, and the end of the run waits its bound, then says so once."""
    release = threading.Event()

    class Stuck:
        name, target = "mlflow", "http://127.0.0.1:9"
        taken = 0

        def log(self, record):
            Stuck.taken += 1
            release.wait(60)

        def close(self):
            pass

    trackers = Trackers([Stuck()], close_seconds=0.5)
    started = time.perf_counter()
    for step in range(1, 201):
        trackers.log({"step": step, "loss": 1.0})
    handed_over = time.perf_counter() - started
    trackers.close()
    closed = time.perf_counter() - started
    release.set()
    assert handed_over < 0.2 and 0.5 <= closed < 2.0, (handed_over, closed)
    assert Stuck.taken == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [
        "mlflow (http://127.0.0.1:9) did not take the run's last records (199 still queued) and end its run within "
        "0.5 s; the run ends without it (metrics.jsonl holds every record)"
    ]


def test_a_tracker_server_that_refuses_or_never_answers_is_one_line_within_seconds(tmp_path, monkeypatch):
    """start_one against a closed port (refused at once) and a port that accepts connections and never answers
    (each request waits REQUEST_SECONDS, no retries): one ConfigError naming the URI, within the bound."""
    pytest.importorskip("mlflow")
    from plm_toolkit.core.errors import ConfigError
    from plm_toolkit.training.tracker_backends import REQUEST_SECONDS
    from plm_toolkit.training.trackers import start_one

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        for uri, reason in (
            ("http://127.0.0.1:9", "connection refused"),
            (f"http://127.0.0.1:{silent.getsockname()[1]}", f"no answer within {REQUEST_SECONDS} s"),
        ):
            monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
            started = time.perf_counter()
            with pytest.raises(ConfigError) as refused:
                start_one("mlflow", tmp_path / "run", {"model": {"name": "bert"}}, None)
            assert time.perf_counter() - started < REQUEST_SECONDS + 10
            assert str(refused.value) == (
                f"trainer.loggers: mlflow could not start at {uri} ({reason}); start the server, or set "
                "MLFLOW_TRACKING_URI to one that answers (or to sqlite:///mlflow.db), or leave mlflow out of "
                "trainer.loggers"
            )
            assert "MLFLOW_HTTP_REQUEST_TIMEOUT" not in os.environ  # the start's bound is not the run's
    finally:
        silent.close()


def test_mlflow_logs_where_mlflow_3_would_by_default(tmp_path, monkeypatch):
    """Without MLFLOW_TRACKING_URI: ./mlflow.db, or ./mlruns where that holds runs already (whatever the installed
    MLflow's own default)."""
    from plm_toolkit.training.tracker_backends import mlflow_uri

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    assert mlflow_uri() == f"sqlite:///{tmp_path}/mlflow.db"
    (tmp_path / "mlruns" / "0").mkdir(parents=True)
    assert mlflow_uri() == f"sqlite:///{tmp_path}/mlflow.db"  # an empty folder is no file store
    (tmp_path / "mlruns" / "0" / "meta.yaml").write_text("name: Default\n")
    assert mlflow_uri() == (tmp_path / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow:5000")
    assert mlflow_uri() == "http://mlflow:5000"
