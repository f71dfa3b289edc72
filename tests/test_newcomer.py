"""What a new user meets first: a quiet install, progress as lines in a log file, evaluation lines in the run's log,
the bundled validation text only with the bundled training text, plm-prepare's report of the text it read, and a
sweep's summary."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module

import plm_toolkit.commands.train  # noqa: F401  (registers schemas and resolvers)
from plm_toolkit.commands.sweep_summary import SUMMARY_JSON, SUMMARY_MD
from plm_toolkit.config import setup as config_setup
from plm_toolkit.core.resources import resource_path
from plm_toolkit.data.sources.bundled import validation_note
from plm_toolkit.data.store.preparation import store_report
from tests.tasks.conftest import SST2_DEV, SST2_TRAIN, save_tiny_checkpoint, tiny_tokenizer
from tests.training.conftest import TINY

ROOT = Path(__file__).resolve().parents[1]


def command(module: str, cwd: Path, *overrides: str) -> subprocess.CompletedProcess:
    """A plm command as a user runs it, its stderr a pipe (not a terminal)."""
    code = f"import sys; from plm_toolkit.commands.{module} import main; sys.argv = ['plm', *sys.argv[1:]]; main()"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", code, *overrides], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)  # fmt: skip


@pytest.mark.slow
def test_progress_is_lines_in_a_log_file_and_evaluations_reach_train_log(tmp_path):
    docs = Path(resource_path("corpora/wikitext2/train.txt")).read_text().split("\n\n")
    (tmp_path / "train.txt").write_text("\n\n".join(docs[:20])[:40000])
    (tmp_path / "valid.txt").write_text("\n\n".join(docs[20:24])[:6000])
    quiet = [o for o in TINY if not o.startswith(("trainer.progress_bar", "trainer.log_every", "trainer.eval_every"))]
    done = command(
        "train",
        tmp_path,
        *quiet,
        "data=text_files",
        f"data.train_files=[{tmp_path / 'train.txt'}]",
        f"data.validation_files=[{tmp_path / 'valid.txt'}]",
        "trainer.max_steps=8",
        "trainer.log_every=4",
        "trainer.eval_every=4",
        "trainer.eval_batches=2",
        "trainer.progress_bar=true",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "\r" not in done.stderr + done.stdout  # no bar frames
    console = done.stdout + done.stderr
    assert "step 4/8 (50%) epoch" in console and "step 8/8 (100%)" in console and " eta " in console
    log = (tmp_path / "run" / "train.log").read_text()
    assert "step=4 eval_loss=" in log and "step=8 eval_loss=" in log and "step 4/8 (50%)" in log


def test_the_bundled_validation_text_goes_with_the_bundled_training_text_only():
    config_setup()
    with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
        bundled = compose("train")
        yours = compose("train", overrides=["data.train_files=[/data/mine.txt]"])
        both = compose("train", overrides=["data.train_files=[/data/mine.txt]", "data.validation_files=[/data/v.txt]"])
    assert [Path(f).name for f in bundled.data.validation_files] == ["valid.txt"] and not validation_note(bundled.data)
    assert list(yours.data.validation_files) == []
    assert "data.validation_files=[FILE,...]" in validation_note(yours.data)
    assert list(both.data.validation_files) == ["/data/v.txt"] and not validation_note(both.data)


def test_plm_prepare_reports_the_text_and_a_rate_only_when_it_means_something():
    manifest = {"splits": {"train": {"tokens": 90000, "documents": 120, "bytes": 400_000}}}
    quick = store_report(Path("store"), manifest, {"train": 1_300_000}, 0.6, 1)
    assert "from 1.30 M characters of training text, 0.4 MB as stored with 1 process(es)" in quick
    assert "/s" not in quick
    slow = store_report(Path("store"), manifest | {"splits": {"train": {**manifest["splits"]["train"],
                        "bytes": 1_300_000}}}, {"train": 1_300_000}, 2.0, 2)  # fmt: skip
    assert "as stored" not in slow and "0.7 M characters/s with 2 process(es)" in slow


@pytest.mark.slow
def test_a_finetune_sweep_ends_with_a_summary_best_first(tmp_path):
    texts = [line.split("\t")[0] for line in Path(SST2_TRAIN).read_text().splitlines()[1:]]
    checkpoint = save_tiny_checkpoint(tmp_path / "pretrained", tiny_tokenizer(texts))
    sweep = tmp_path / "sweep"
    done = command(
        "finetune",
        tmp_path,
        "-m",
        f"model.checkpoint={checkpoint}",
        f"data.train_file={SST2_TRAIN}",
        f"data.validation_file={SST2_DEV}",
        "data.max_seq_len=32",
        "data.max_train_samples=48",
        "data.max_eval_samples=40",
        "trainer.batch_size=16",
        "trainer.epochs=1",
        "trainer.progress_bar=false",
        "trainer.tensorboard=false",
        "hardware=cpu",
        "optimizer.lr=1e-5,3e-3",
        f"hydra.sweep.dir={sweep}",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((sweep / SUMMARY_JSON).read_text())
    assert summary["ranked_by"] == "eval_accuracy" and summary["higher_is_better"]
    jobs = summary["jobs"]
    assert sorted(job["folder"] for job in jobs) == ["0", "1"]
    values = [job["figures"]["eval_accuracy"] for job in jobs]
    assert values == sorted(values, reverse=True)
    for job in jobs:
        results = json.loads((sweep / job["folder"] / "eval_results.json").read_text())
        assert job["figures"]["eval_accuracy"] == results["accuracy"]
        assert any(o.startswith("optimizer.lr=") for o in job["overrides"])
    table = (sweep / SUMMARY_MD).read_text()
    assert "| folder | overrides | eval_accuracy |" in table and "optimizer.lr=0.003" in table
    assert "model.checkpoint" not in table  # shared by every job: left out
    assert "sweep summary:" in done.stdout + done.stderr
