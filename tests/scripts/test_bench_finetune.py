"""scripts/bench_finetune.py fine-tunes one local checkpoint with plm-finetune (and, with accelerate installed, with
transformers' Trainer, its batches grouped by length and not) on the same rows and prints every side in one JSON
object."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_finetune.py"
WORDS = ["a", "film", "good", "bad", "great", "awful", "movie", "the", "was", "very"]


@pytest.fixture
def setup(tmp_path):
    transformers = pytest.importorskip("transformers")
    model_dir, data_dir = tmp_path / "model", tmp_path / "sst2"
    config = transformers.BertConfig(
        vocab_size=5 + len(WORDS), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=37, max_position_embeddings=64,
    )  # fmt: skip
    transformers.BertModel(config).save_pretrained(model_dir)
    (model_dir / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    data_dir.mkdir()
    rows = [(f"the film was {'very ' * (i % 4)}{'good' if i % 2 else 'awful'}", i % 2) for i in range(40)]
    for name, part in (("train.tsv", rows[:32]), ("dev.tsv", rows[32:])):
        (data_dir / name).write_text("sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for s, y in part))
    return model_dir, data_dir


def run(model_dir, data_dir, *extra):
    args = ["--model", str(model_dir), "--data", str(data_dir), "--train-samples", "32", "--batch-size", "8"]
    command = [sys.executable, str(SCRIPT), *args, "--threads", "1", *extra]
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.slow
def test_plm_finetune_side_runs_the_requested_steps_and_variant(setup):
    result = run(*setup, "--skip-transformers", "--variants", "ungrouped")
    assert result["steps"] == 4 and "transformers" not in result and "time_ratios" not in result
    for name in ("ours", "ungrouped"):
        assert result[name]["train_seconds"] > 0 and 0.0 <= result[name]["accuracy"] <= 1.0


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("accelerate") is None, reason="the Trainer needs accelerate (bench extra)")
def test_every_side_and_the_time_ratios(setup):
    result = run(*setup, "--variants", "ungrouped")
    grouped, default = result["transformers_grouped"], result["transformers"]
    for side in (grouped, default):
        assert side["optimizer"] == "adamw_torch_fused" and side["train_seconds"] > 0
        assert 0.0 <= side["accuracy"] <= 1.0
    # The Trainer's own length grouping on one side, its default random batches on the other.
    assert set(grouped["sampling"].values()) & {"group_by_length", True}
    assert not set(default["sampling"].values()) & {"group_by_length", True}
    seconds = {name: result[name]["train_seconds"] for name in ("ours", "ungrouped")}
    assert result["time_ratios"] == {
        "vs_grouped": round(seconds["ours"] / grouped["train_seconds"], 3),
        "vs_default": round(seconds["ours"] / default["train_seconds"], 3),
        "ungrouped_vs_default": round(seconds["ungrouped"] / default["train_seconds"], 3),
    }
