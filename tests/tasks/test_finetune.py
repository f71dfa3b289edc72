"""plm-finetune end to end on a tiny odd-sized BERT: each task type's loss falls, outputs land in the run
directory, resume continues exactly, and Hugging Face folders and fine-tuned checkpoints load as backbones."""

import json
import shutil
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from plm_toolkit.commands.finetune import run
from plm_toolkit.config.validate import validate
from plm_toolkit.core.errors import CheckpointError, ConfigError
from plm_toolkit.interop.hf import export_hf
from plm_toolkit.interop.pretrained import load_backbone
from tests.training.conftest import read_metrics

from .conftest import QUIET, SST2_DEV, SST2_TRAIN

SST2 = [f"data.train_file={SST2_TRAIN}", f"data.validation_file={SST2_DEV}", "data.max_seq_len=40"]
FAST = ["model.dropout=0", "optimizer.lr=1e-2", "optimizer.warmup_ratio=0", "trainer.batch_size=16"]


def losses(run_dir):
    return [r["loss"] for r in read_metrics(run_dir) if "lr" in r]


def falls(values, drop):
    first, last = sum(values[:5]) / 5, sum(values[-5:]) / 5
    return last < first - drop, (first, last)


@pytest.mark.slow
def test_sst2_loss_falls_and_outputs_land_in_the_run_directory(finetune_config, tmp_path):
    cfg = finetune_config(
        *SST2, *FAST, "data.max_train_samples=64", "data.max_eval_samples=100", "trainer.max_steps=30"
    )
    final = run(cfg, tmp_path)
    ok, detail = falls(losses(tmp_path), 0.3)
    assert ok, detail
    results = json.loads((tmp_path / "eval_results.json").read_text())
    assert set(results) == {"accuracy"} and final["eval_accuracy"] == results["accuracy"]
    predictions = json.loads((tmp_path / "predictions.json").read_text())
    assert len(predictions) == 100 and set(predictions.values()) <= {"0", "1"}
    saved = (tmp_path / "checkpoints" / "last" / "config.yaml").read_text()
    assert "backbone:" in saved and "labels:" in saved


@pytest.mark.slow
def test_squad2_loss_falls_and_writes_the_official_files(finetune_config, tmp_path, shared_data):
    squad = shared_data / "squad2" / "cs224n-dev-v2.0.json"
    cfg = finetune_config(
        "task=squad2",
        f"data.train_file={squad}",
        f"data.validation_file={squad}",
        "data.max_seq_len=64",
        "task.doc_stride=32",
        "task.max_query_length=20",
        "data.max_train_samples=12",
        "data.max_eval_samples=12",
        *FAST,
        "trainer.batch_size=8",
        "trainer.max_steps=30",
    )
    run(cfg, tmp_path)
    ok, detail = falls(losses(tmp_path), 1.0)
    assert ok, detail
    results = json.loads((tmp_path / "eval_results.json").read_text())
    keys = {
        "exact",
        "f1",
        "total",
        "HasAns_exact",
        "HasAns_f1",
        "HasAns_total",
        "NoAns_exact",
        "NoAns_f1",
        "NoAns_total",
        "best_exact",
        "best_exact_thresh",
        "best_f1",
        "best_f1_thresh",
        "span_best_exact",
        "span_best_exact_thresh",
        "span_best_f1",
        "span_best_f1_thresh",
    }
    assert set(results) == keys and results["total"] == 12
    predictions = json.loads((tmp_path / "predictions.json").read_text())
    odds = json.loads((tmp_path / "null_odds.json").read_text())
    assert predictions.keys() == odds.keys() and len(predictions) == 12
    # tau = 0: a question is answered exactly when its null odds are not positive.
    assert all((predictions[q] == "") == (odds[q] > 0) for q in odds if predictions[q] or odds[q] > 0)


@pytest.mark.slow
def test_ner_loss_falls(finetune_config, tmp_path, shared_data):
    ner = shared_data / "ner"
    cfg = finetune_config(
        "task=ner",
        f"data.train_file={ner / 'wnut17train.conll'}",
        f"data.validation_file={ner / 'emerging.dev.conll'}",
        "data.max_seq_len=48",
        "data.max_train_samples=48",
        "data.max_eval_samples=40",
        *FAST,
        "trainer.max_steps=30",
    )
    run(cfg, tmp_path)
    ok, detail = falls(losses(tmp_path), 0.5)
    assert ok, detail
    results = json.loads((tmp_path / "eval_results.json").read_text())
    assert set(results) == {"precision", "recall", "f1", "accuracy"} and results["accuracy"] > 0.8


def test_regression_task_reports_correlations(finetune_config, tmp_path):
    rows = "sentence1\tsentence2\tscore\n" + "".join(
        f"{a}\t{b}\t{s}\n" for a, b, s in [("a cat", "a cat", 5.0), ("a dog", "the sea", 0.4), ("red", "blue", 1.5)] * 8
    )
    (tmp_path / "train.tsv").write_text(rows)
    cfg = finetune_config(
        "task=stsb",
        f"data.train_file={tmp_path / 'train.tsv'}",
        f"data.validation_file={tmp_path / 'train.tsv'}",
        *FAST,
        "trainer.batch_size=8",
        "trainer.max_steps=20",
    )
    run(cfg, tmp_path / "run")
    assert falls(losses(tmp_path / "run"), 0.5)[0]
    assert set(json.loads((tmp_path / "run" / "eval_results.json").read_text())) == {"pearson", "spearman"}


def test_resume_continues_exactly(finetune_config, tmp_path):
    common = [
        *SST2,
        *FAST,
        "data.max_train_samples=64",
        "data.max_eval_samples=50",
        "optimizer.total_steps=10",
        "trainer.save_every=5",
    ]
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    run(finetune_config(*common, "trainer.max_steps=10"), straight)
    run(finetune_config(*common, "trainer.max_steps=5"), interrupted)
    run(finetune_config(*common, "trainer.max_steps=10"), interrupted)
    assert losses(straight) == losses(interrupted) and len(losses(straight)) == 10
    a = load_file(straight / "checkpoints" / "last" / "objective.safetensors")
    b = load_file(interrupted / "checkpoints" / "last" / "objective.safetensors")
    assert a.keys() == {"head.linear.weight", "head.linear.bias"} and all(torch.equal(a[k], b[k]) for k in a)
    assert json.loads((straight / "eval_results.json").read_text()) == json.loads(
        (interrupted / "eval_results.json").read_text()
    )


def test_hugging_face_folder_and_finetuned_checkpoint_load_as_backbones(tiny_checkpoint, finetune_config, tmp_path):
    plm = load_backbone(tiny_checkpoint)
    hf = tmp_path / "hf"
    export_hf(hf, plm.model, tokenizer_file=tiny_checkpoint / "tokenizer.json")
    loaded = load_backbone(hf)
    assert loaded.kind == "hf:bert"
    ours, theirs = plm.model.state_dict(), loaded.model.state_dict()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    # A fine-tuned run's checkpoint carries its backbone's architecture and loads again.
    run(
        finetune_config(*SST2, f"model.checkpoint={hf}", "data.max_train_samples=8", "trainer.max_steps=2"),
        tmp_path / "run",
    )
    again = load_backbone(tmp_path / "run")
    assert again.kind == "plm_train" and again.model.config.hidden_size == 36
    (hf / "config.json").write_text(json.dumps({"model_type": "bart"}))
    with pytest.raises(CheckpointError, match="model_type is 'bart'; supported: albert, bert"):
        load_backbone(hf)


def test_configuration_errors_name_the_keys(finetune_config, tmp_path):
    with pytest.raises(ConfigError, match="data.train_file is not set"):
        validate(finetune_config())
    with pytest.raises(ConfigError, match="model.checkpoint=/no/such: no such file"):
        validate(finetune_config(*SST2, "model.checkpoint=/no/such"))
    with pytest.raises(ConfigError, match="task.metrics: unknown \\['auc'\\]"):
        validate(finetune_config(*SST2, "task.metrics=[auc]"))


@pytest.mark.slow
def test_cli_reports_where_outputs_went(tiny_checkpoint, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(tiny_checkpoint, tmp_path / "pretrained")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "plm_toolkit.commands.finetune",
            f"model.checkpoint={tmp_path / 'pretrained'}",
            *SST2,
            *QUIET,
            "data.max_train_samples=16",
            "data.max_eval_samples=16",
            "trainer.epochs=1",  # plm-finetune counts in epochs: 16 examples at batch 8 are 2 steps
            "trainer.batch_size=8",
            f"hydra.run.dir={out}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "training for 2 optimizer steps: 1 epochs of 16 examples at a global batch of 8" in result.stdout
    assert f"eval results: {out / 'eval_results.json'}" in result.stdout + result.stderr
    assert [r["epoch"] for r in read_metrics(out) if "lr" in r] == [0.5, 1.0]
    assert (out / "checkpoints" / "step_2" / "model.safetensors").is_file()


def test_evaluation_only_of_a_fine_tuned_checkpoint_reproduces_its_evaluation(finetune_config, tmp_path):
    """trainer.resume restores the head too; trainer.epochs=0 then evaluates it without training or saving."""
    common = [*SST2, *FAST, "data.max_train_samples=32", "data.max_eval_samples=50"]
    run(finetune_config(*common, "trainer.max_steps=5"), tmp_path / "trained")
    last = tmp_path / "trained" / "checkpoints" / "last"
    again = [f"model.checkpoint={last}", f"trainer.resume={last}", "trainer.epochs=0", "data.train_file=null"]
    run(finetune_config(*common, *again), tmp_path / "evaluated")
    for name in ("eval_results.json", "predictions.json"):
        trained, evaluated = ((tmp_path / run_dir / name).read_text() for run_dir in ("trained", "evaluated"))
        assert json.loads(evaluated) == json.loads(trained)
    assert not (tmp_path / "evaluated" / "checkpoints").exists()
