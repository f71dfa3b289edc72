"""trainer.loggers: MLflow (a local file store) and Weights & Biases (offline mode) get the resolved config, every
metric (evaluation included) and the run directory through the real command line; a tracker that fails in the middle
of a run is dropped, not the run. A tracker that is missing or cannot start:
tests/bad_inputs/test_bad_inputs_trackers.py."""

import json
import os
import subprocess
import sys
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


@pytest.mark.slow
def test_mlflow_and_wandb_get_config_metrics_and_run_directory(tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow")
    pytest.importorskip("wandb")
    store = tmp_path / "mlruns"
    env = {"MLFLOW_TRACKING_URI": store.as_uri(), "WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path)}
    run_dir = tmp_path / "run"
    overrides = [*TINY, *corpus(tmp_path), "trainer.max_steps=4", "trainer.eval_every=2", "trainer.eval_batches=2"]
    overrides += ["trainer.loggers=[jsonl,mlflow,wandb]", f"hydra.run.dir={run_dir}"]
    done = plm_train(tmp_path, *overrides, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not (run_dir / "tensorboard").exists() and (run_dir / "metrics.jsonl").is_file()

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    mlflow.set_tracking_uri(store.as_uri())
    ids = json.loads((run_dir / "trackers.json").read_text())
    found = mlflow.get_run(ids["mlflow"])
    assert found.data.tags["run_dir"] == str(run_dir.resolve())
    assert found.data.params["model.hidden_size"] == "36" and found.data.params["trainer.max_steps"] == "4"
    client = mlflow.tracking.MlflowClient()
    assert [m.step for m in client.get_metric_history(ids["mlflow"], "loss")] == [1, 2, 3, 4]
    assert [m.step for m in client.get_metric_history(ids["mlflow"], "eval_loss")] == [2, 4]

    offline = list(tmp_path.glob("wandb/offline-run-*"))
    assert len(offline) == 1 and ids["wandb"] in offline[0].name
    # The offline run's records (protobuf in a LevelDB-style log, what wandb sync uploads) hold the config, the
    # evaluation metrics and the run directory.
    records = next(offline[0].glob("*.wandb")).read_bytes()
    for expected in (b"hidden_size", b"eval_loss", b"tokens_per_s", b"run_dir", str(run_dir.resolve()).encode()):
        assert expected in records, expected


def test_loggers_are_checked_and_a_failing_tracker_never_costs_the_run(caplog):
    from omegaconf import OmegaConf

    assert chosen_loggers(OmegaConf.create({"loggers": ["tensorboard", "jsonl"], "tensorboard": False})) == ["jsonl"]
    with pytest.raises(Exception, match="trainer.loggers: unknown comet; valid: tensorboard, jsonl, mlflow, wandb"):
        chosen_loggers(OmegaConf.create({"loggers": ["comet"]}))

    class Broken:
        name = "broken"
        seen = 0

        def log(self, record):
            raise OSError("disk full")

        def close(self):
            pass

    class Counting(Broken):
        name = "counting"

        def log(self, record):
            Counting.seen += 1

    trackers = Trackers([Broken(), Counting()])
    trackers.log({"step": 1, "loss": 1.0})
    trackers.log({"step": 2, "loss": 0.5})
    assert Counting.seen == 2 and [t.name for t in trackers.trackers] == ["counting"]
    assert "broken failed (disk full)" in caplog.text
