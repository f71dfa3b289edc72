"""plm-finetune keeps its best model (trainer.load_best_model_at_end, evaluation every epoch) and stops early
(trainer.early_stopping_patience), and a resumed run chooses and stops exactly as the uninterrupted one."""

import json
import os
import shutil

import pytest
import torch
from safetensors.torch import load_file

from plm_toolkit.commands.finetune import run
from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core.errors import ConfigError
from plm_toolkit.training.best_model import BestModel, Verdict
from plm_toolkit.training.distributed import ProcessInfo
from plm_toolkit.training.selection import BEST_LINK, Selection, default_metric
from tests.tasks.conftest import SST2_DEV, SST2_TRAIN
from tests.training.conftest import read_metrics

# 64 examples at a batch of 16: an epoch is 4 steps.
SST2 = [
    f"data.train_file={SST2_TRAIN}",
    f"data.validation_file={SST2_DEV}",
    "data.max_seq_len=40",
    "data.max_train_samples=64",
    "data.max_eval_samples=60",
]
FAST = ["model.dropout=0", "optimizer.lr=1e-2", "optimizer.warmup_ratio=0", "trainer.batch_size=16"]
# At lr 1e-2 the tiny model peaks on dev accuracy (0.583 at step 20) and then overfits.
SCHEDULE = ["optimizer.total_steps=40"]


def evaluations(run_dir) -> dict[int, dict]:
    return {r["step"]: r for r in read_metrics(run_dir) if "eval_loss" in r}


def timeless(run_dir) -> list[dict]:
    """metrics.jsonl without the wall-clock figures."""
    return [
        {k: v for k, v in r.items() if k not in ("tokens_per_s", "step_s", "elapsed_s", "mfu")}
        for r in read_metrics(run_dir)
    ]


def selection(**changes) -> Selection:
    values = {"metric": "eval_accuracy", "greater_is_better": True, "patience": 2, "threshold": 0.01}
    return Selection(**(values | changes), keep_best=True)


def test_selection_follows_transformers_rules():
    chosen = selection()
    steps = [(4, 0.5), (8, 0.6), (12, 0.605), (16, 0.59)]
    verdicts = [chosen.observe({"step": s, "eval_accuracy": v}) for s, v in steps]
    # 0.605 is the best, but gains no more than the threshold: it counts against the patience as transformers does.
    assert verdicts == [True, True, True, False]
    assert (chosen.best_step, chosen.best_value, chosen.bad_evaluations, chosen.stopped) == (12, 0.605, 2, True)
    again = selection()
    again.load_state_dict(chosen.state_dict())
    assert again == chosen
    lower = Selection("eval_loss", False, 0, 0.0, True)
    assert [lower.observe({"step": s, "eval_loss": v}) for s, v in ((1, 2.0), (2, 1.0), (3, float("nan")))] == [
        True,
        True,
        False,
    ]
    with pytest.raises(ConfigError, match="metric_for_best_model=f1: the evaluation reports no eval_f1"):
        Selection("eval_f1", True, 0, 0.0, True).observe({"step": 1, "eval_accuracy": 0.5})


def test_verdicts_keep_each_best_step_and_stop_once_when_patience_runs_out(tmp_path):
    best = BestModel(selection(), tmp_path, ProcessInfo(), has_validation=True, evaluates=True, trains=True, fsdp=False)
    steps = [(4, 0.5), (8, 0.6), (12, 0.605), (16, 0.59), (20, 0.58)]
    verdicts = [best.judge({"step": s, "eval_accuracy": v}) for s, v in steps]
    keep = Verdict(keep=True)
    assert verdicts == [keep, keep, keep, Verdict(stop=True, stopped_now=True), Verdict(stop=True)]
    (tmp_path / "step_12").mkdir()
    best.settle(keep, tmp_path / "step_12", 12)  # after the Trainer saved step 12
    assert os.readlink(tmp_path / BEST_LINK) == "step_12"
    # Without validation data a kept best model is the last step's; nothing is judged.
    unjudged = BestModel(
        selection(patience=0), tmp_path, ProcessInfo(), has_validation=False, evaluates=False, trains=True, fsdp=False
    )
    assert unjudged.selection is None and unjudged.judge({"step": 4, "eval_accuracy": 0.5}) == Verdict()


def test_default_metric_is_the_tasks_main_metric(finetune_config):
    class Config:
        metrics = ["f1", "accuracy"]

    class Task:
        config = Config()

    assert default_metric(Task()) == "f1"
    assert default_metric(object()) == "loss"
    cfg = finetune_config(*SST2)
    assert cfg.trainer.load_best_model_at_end and cfg.trainer.eval_strategy == "epoch"


@pytest.mark.slow
def test_the_run_ends_with_the_best_evaluations_model_and_results(finetune_config, tmp_path):
    run(finetune_config(*SST2, *FAST, *SCHEDULE, "trainer.max_steps=28"), tmp_path)
    evaluated = evaluations(tmp_path)
    assert sorted(evaluated) == [4, 8, 12, 16, 20, 24, 28]  # every epoch; 28 is also the end
    # The task's main metric (accuracy) picks; a tie keeps the earlier model, as transformers does.
    best = min(evaluated, key=lambda step: (-evaluated[step]["eval_accuracy"], step))
    assert best != 28
    root = tmp_path / "checkpoints"
    assert os.readlink(root / "best") == f"step_{best}" and (root / "last").resolve().name == "step_28"
    # eval_results.json and the predictions are the best evaluation's, as its own record says.
    results = json.loads((tmp_path / "eval_results.json").read_text())
    assert results["accuracy"] == evaluated[best]["eval_accuracy"]
    # A run directory names its best model to every command that loads one.
    assert ckpt.plm_checkpoint_dir(tmp_path) == (root / f"step_{best}").resolve()


@pytest.mark.slow
def test_early_stopping_stops_and_a_rerun_trains_nothing(finetune_config, tmp_path):
    cfg = finetune_config(*SST2, *FAST, *SCHEDULE, "trainer.early_stopping_patience=2", "trainer.max_steps=40")
    run(cfg, tmp_path)
    evaluated = evaluations(tmp_path)
    # Dev accuracy stays at 0.533 over the first three epochs: two evaluations without improvement stop the run.
    assert sorted(evaluated) == [4, 8, 12]
    assert max(r["step"] for r in read_metrics(tmp_path)) == 12
    before = (tmp_path / "eval_results.json").read_text()
    run(cfg, tmp_path)  # resumes, finds the run stopped, trains nothing
    assert max(r["step"] for r in read_metrics(tmp_path)) == 12
    assert (tmp_path / "eval_results.json").read_text() == before


@pytest.mark.slow
def test_resume_chooses_and_stops_as_the_uninterrupted_run(finetune_config, tmp_path):
    """The run's checkpoints up to step 6 (between two evaluations) as a crash would leave them, resumed."""
    common = [*SST2, *FAST, "trainer.max_steps=20", "trainer.keep_last=0", "trainer.save_every=2"]
    common += ["trainer.early_stopping_patience=2", "trainer.metric_for_best_model=loss"]
    straight, crashed = tmp_path / "straight", tmp_path / "crashed"
    run(finetune_config(*common), straight)
    (crashed / "checkpoints").mkdir(parents=True)
    for folder in ckpt.list_checkpoints(straight / "checkpoints"):
        if int(folder.name[5:]) <= 6:
            shutil.copytree(folder, crashed / "checkpoints" / folder.name)
    shutil.copy(straight / "metrics.jsonl", crashed / "metrics.jsonl")
    run(finetune_config(*common), crashed)
    assert timeless(straight) == timeless(crashed)
    for name in ("best", "last"):
        assert os.readlink(straight / "checkpoints" / name) == os.readlink(crashed / "checkpoints" / name)
    a = load_file(straight / "checkpoints" / "best" / "objective.safetensors")
    b = load_file(crashed / "checkpoints" / "best" / "objective.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert (straight / "eval_results.json").read_text() == (crashed / "eval_results.json").read_text()
