"""plm-train model=transformer objective=translation data=parallel on a slice of the real en-de pairs: the loss
falls, evaluation decodes and scores BLEU/chrF, resume is exact, and impossible combinations name their keys (bad
parallel files are cases of tests/bad_inputs)."""

import json
import math
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_module
from safetensors.torch import load_file

from plm_toolkit.commands.train import run
from plm_toolkit.core.errors import ConfigError
from tests.training.conftest import read_metrics, train_records

pytest.importorskip("sacrebleu")

TINY = [
    "model=transformer",
    "model.hidden_size=32",
    "model.num_heads=2",
    "model.intermediate_size=48",
    "model.max_position_embeddings=64",
    "data.max_seq_len=48",
    "data.tokenizer.vocab_size=600",
    "trainer.log_every=1",
    "trainer.eval_every=0",
    "trainer.progress_bar=false",
    "trainer.tensorboard=false",
    "optimizer.lr=3e-3",
    "hardware=cpu",
]


@pytest.fixture(scope="module")
def en_de(tmp_path_factory):
    """800 training pairs as line-aligned files and 30 validation pairs as JSONL, from the shared en-de data."""
    source = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "translation" / "en-de"
    if not source.is_dir():
        pytest.skip(f"shared data not found at {source}")
    root = tmp_path_factory.mktemp("en_de")
    for lang in ("en", "de"):
        lines = (source / f"train.{lang}").read_text(encoding="utf-8").splitlines(keepends=True)
        (root / f"train.{lang}").write_text("".join(lines[:800]), encoding="utf-8")
    dev = (source / "dev.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (root / "dev.jsonl").write_text("".join(dev[:30]), encoding="utf-8")
    return {"train": str(root / "train"), "dev": str(root / "dev.jsonl"), "cache": str(tmp_path_factory.mktemp("c"))}


@pytest.fixture
def make_config(en_de):
    def make(*overrides: str, parallel: bool = True, translation: bool = True):
        data = [
            f"data.train_files=[{en_de['train']}]",
            f"data.validation_files=[{en_de['dev']}]",
            f"data.cache_dir={en_de['cache']}",
        ]
        data += ["data.max_tokens=700"] if parallel else []
        data += ["objective.num_beams=2", "objective.max_length_b=8"] if translation else []
        with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
            return compose("train", overrides=TINY + data + list(overrides))

    return make


@pytest.mark.slow
def test_sixty_steps_loss_falls_and_evaluation_scores_bleu(make_config, tmp_path):
    final = run(make_config("trainer.max_steps=60", "trainer.eval_every=30", "trainer.save_every=30"), tmp_path)
    records = read_metrics(tmp_path)
    train = [r for r in records if "lr" in r]
    first, last = sum(r["loss"] for r in train[:5]) / 5, sum(r["loss"] for r in train[-5:]) / 5
    assert last < first - 1.0, (first, last)
    assert {"translation_nll", "translation_accuracy"} <= set(train[0])
    assert train[-1]["translation_nll"] < train[-1]["loss"]  # smoothing costs more than the plain NLL
    evals = [r for r in records if "eval_loss" in r]
    assert [r["step"] for r in evals] == [30, 60]
    assert all(0.0 <= r["eval_bleu"] <= 100.0 and 0.0 <= r["eval_chrf"] <= 100.0 for r in evals)
    assert evals[-1]["eval_translation_nll"] < evals[0]["eval_translation_nll"]
    assert final["eval_bleu"] == evals[-1]["eval_bleu"]
    results = json.loads((tmp_path / "eval_results.json").read_text())
    assert results["bleu"] == pytest.approx(evals[-1]["eval_bleu"]) and results["sentences"] == 30
    assert results["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert results["chrf_signature"].startswith("nrefs:1|case:mixed")
    assert len((tmp_path / "translations.txt").read_text(encoding="utf-8").splitlines()) == 30
    assert math.isfinite(evals[-1]["eval_loss"])


@pytest.mark.slow
def test_resume_continues_exactly(make_config, tmp_path):
    common = ["trainer.save_every=6", "optimizer.total_steps=12", "trainer.seed=5", "objective.decode=false"]
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    run(make_config("trainer.max_steps=12", *common), straight)
    run(make_config("trainer.max_steps=6", *common), interrupted)
    run(make_config("trainer.max_steps=12", "trainer.resume=auto", *common), interrupted)
    a, b = train_records(straight), train_records(interrupted)
    assert [r["step"] for r in b] == list(range(1, 13))
    assert [r["loss"] for r in a] == [r["loss"] for r in b]
    wa = load_file(straight / "checkpoints" / "last" / "model.safetensors")
    wb = load_file(interrupted / "checkpoints" / "last" / "model.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_impossible_combinations_name_the_keys(make_config, tmp_path):
    with pytest.raises(ConfigError, match="objective.num_beams=0"):
        run(make_config("objective.num_beams=0"), tmp_path)
    with pytest.raises(ConfigError, match="objective=translation trains on sentence pairs: set data=parallel"):
        run(make_config("data=text_files", parallel=False), tmp_path)
    with pytest.raises(ConfigError, match="objective=translation needs a model that is encoder_decoder"):
        run(make_config("model=bert_tiny", "data=parallel", "objective=translation"), tmp_path)
    with pytest.raises(ConfigError, match="data=parallel holds sentence pairs, which objective=mlm does not read"):
        run(make_config("objective=mlm", translation=False), tmp_path)
    with pytest.raises(ConfigError, match="data.max_tokens=20 is below data.max_seq_len=48"):
        run(make_config("data.max_tokens=20"), tmp_path)
