"""The keys of issue 29 given wrong, through the real command line: a tracker that is unknown, not installed or
cannot start (no W&B login; an MLflow server on a closed port or one that never answers, within seconds; a database
URI without SQLAlchemy) stops before any work with one line; a negative patience is refused by validation; a
trainer.metric_for_best_model the evaluation does not report stops at the first evaluation with one line, after
saving the steps before it."""

# The table of cases reads best one case a line, as in test_bad_inputs.py.
# ruff: noqa: E501
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from plm_toolkit.core.checkpoint import list_checkpoints
from tests.tasks.conftest import SST2_DEV, SST2_TRAIN, save_tiny_checkpoint, tiny_tokenizer

TRAIN = ["model=bert_tiny", "hardware=cpu", "trainer.progress_bar=false"]
CASES = {
    "unknown logger": (
        TRAIN + ["trainer.loggers=[jsonl,comet]"],
        {},
        "",
        "trainer.loggers: unknown comet; valid: tensorboard, jsonl, mlflow, wandb",
    ),
    "mlflow missing": (
        TRAIN + ["trainer.loggers=[mlflow]"],
        {},
        "sys.modules['mlflow'] = None; ",
        "trainer.loggers: mlflow is not installed: pip install 'plm_toolkit[mlflow]'",
    ),
    "wandb missing": (
        TRAIN + ["trainer.loggers=[wandb]"],
        {},
        "sys.modules['wandb'] = None; ",
        "trainer.loggers: wandb is not installed: pip install 'plm_toolkit[wandb]'",
    ),
    "wandb without login": (
        TRAIN + ["trainer.loggers=[jsonl,wandb]"],
        {"WANDB_MODE": "online", "WANDB_API_KEY": ""},
        "",
        "trainer.loggers: wandb could not start (no W&B login (run wandb login, or set WANDB_MODE=offline",
    ),
    "mlflow server on a closed port": (
        TRAIN + ["trainer.loggers=[jsonl,mlflow]"],
        {"MLFLOW_TRACKING_URI": "http://127.0.0.1:9"},
        "",
        "trainer.loggers: mlflow could not start at http://127.0.0.1:9 (connection refused); start the server, or set MLFLOW_TRACKING_URI to one that answers (or to sqlite:///mlflow.db), or leave mlflow out of trainer.loggers",
    ),
    "mlflow database without SQLAlchemy": (
        TRAIN + ["trainer.loggers=[jsonl,mlflow]"],
        {"MLFLOW_TRACKING_URI": "sqlite:///runs/mlflow.db"},
        "sys.modules['sqlalchemy'] = None; ",
        "trainer.loggers: mlflow cannot log here: MLFLOW_TRACKING_URI=sqlite:///runs/mlflow.db is a database, which MLflow reaches through SQLAlchemy, and SQLAlchemy is not installed: pip install 'plm_toolkit[mlflow]'; or leave mlflow out of trainer.loggers",
    ),
    "negative patience": (
        TRAIN + ["trainer.early_stopping_patience=-1"],
        {},
        "",
        "trainer.early_stopping_patience=-1: must be 0 (off) or positive",
    ),
}


def command(module: str, cwd: Path, overrides: list[str], env: dict, python: str = "") -> subprocess.CompletedProcess:
    code = (
        f"import sys; {python}from plm_toolkit.commands.{module} import main; sys.argv = ['plm', *sys.argv[1:]]; main()"
    )
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "HOME": str(cwd), "NETRC": str(cwd / "netrc"), **env}
    return subprocess.run(
        [sys.executable, "-c", code, *overrides], cwd=cwd, env=environment, capture_output=True, text=True, timeout=600
    )


def one_error_line(done: subprocess.CompletedProcess, expected: str) -> None:
    output = f"stdout:\n{done.stdout[-2000:]}\nstderr:\n{done.stderr[-3000:]}"
    assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr, output
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], output


# The whole command (Python's and torch's imports, validation, the tracker's start) on a loaded 2-core machine; the
# tracker's own part is bounded to seconds (tests/training/test_trackers.py). Unbounded, a closed port held the run
# for over 200 s (MLflow's 7 retries with back-off) and a silent server for 120 s a request.
COMMAND_SECONDS = 90


@pytest.mark.parametrize("name", list(CASES))
def test_a_tracker_or_selection_key_given_wrong_is_one_line_before_any_work(name, tmp_path):
    overrides, env, python, expected = CASES[name]
    if "wandb" in name and "missing" not in name:
        pytest.importorskip("wandb")
    if "mlflow" in name and "missing" not in name:
        pytest.importorskip("mlflow")
    run = tmp_path / "run"
    started = time.monotonic()
    done = command("train", tmp_path, [*overrides, f"hydra.run.dir={run}"], env, python)
    one_error_line(done, expected)
    assert time.monotonic() - started < COMMAND_SECONDS
    assert not (run / "checkpoints").exists() and not (run / "metrics.jsonl").exists()


@pytest.mark.slow
def test_an_mlflow_server_that_never_answers_is_one_line_within_seconds(tmp_path):
    """A port that accepts connections and never answers (a hung server, a firewall that drops replies): the start
    gives up after one request's REQUEST_SECONDS, before any work."""
    pytest.importorskip("mlflow")
    from plm_toolkit.training.tracker_backends import REQUEST_SECONDS

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        uri = f"http://127.0.0.1:{silent.getsockname()[1]}"
        run = tmp_path / "run"
        started = time.monotonic()
        overrides = [*TRAIN, "trainer.loggers=[jsonl,mlflow]", f"hydra.run.dir={run}"]
        done = command("train", tmp_path, overrides, {"MLFLOW_TRACKING_URI": uri})
        elapsed = time.monotonic() - started
    one_error_line(done, f"trainer.loggers: mlflow could not start at {uri} (no answer within {REQUEST_SECONDS} s)")
    assert elapsed < COMMAND_SECONDS
    assert not (run / "checkpoints").exists() and not (run / "metrics.jsonl").exists()


@pytest.mark.slow
def test_a_metric_the_evaluation_does_not_report_stops_after_saving(tmp_path):
    texts = [line.split("\t")[0] for line in Path(SST2_TRAIN).read_text().splitlines()[1:]]
    checkpoint = save_tiny_checkpoint(tmp_path / "pretrained", tiny_tokenizer(texts))
    run = tmp_path / "run"
    overrides = [f"model.checkpoint={checkpoint}", f"data.train_file={SST2_TRAIN}", f"data.validation_file={SST2_DEV}",
                 "data.max_seq_len=32", "data.max_train_samples=32", "data.max_eval_samples=16", "trainer.batch_size=16",
                 "trainer.epochs=2", "trainer.progress_bar=false", "hardware=cpu", "trainer.metric_for_best_model=f1",
                 f"hydra.run.dir={run}"]  # fmt: skip
    done = command("finetune", tmp_path, overrides, {})
    one_error_line(
        done,
        "trainer.metric_for_best_model=f1: the evaluation reports no eval_f1; it reports eval_loss, eval_task_loss, eval_task_accuracy, eval_accuracy",
    )
    assert [p.name for p in list_checkpoints(run / "checkpoints")] == ["step_2"]  # the first epoch's steps are kept
