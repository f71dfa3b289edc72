"""End-to-end T5 span-corruption runs: the loss falls over 60 steps, resume is exact, bad combinations are refused."""

import math

import pytest
import torch
from omegaconf import OmegaConf

from plm_toolkit.errors import ConfigError, DataError
from plm_toolkit.train import run

from .conftest import read_metrics

# A tiny T5 with odd sizes; 300 tokens of vocabulary (100 of them sentinels).
T5 = [
    "model=t5",
    "model.hidden_size=36",
    "model.num_heads=3",
    "model.head_size=11",
    "model.intermediate_size=37",
    "model.num_decoder_layers=3",
    "data.max_seq_len=40",
    "data.tokenizer.vocab_size=300",
    "trainer.batch_size=8",
    "trainer.log_every=1",
    "trainer.eval_every=0",
    "trainer.progress_bar=false",
    "trainer.tensorboard=false",
    "hardware=cpu",
    "optimizer.lr=3e-3",
]


@pytest.mark.slow
def test_sixty_steps_of_span_corruption_lower_the_loss(make_config, tmp_path):
    steps = ["trainer.max_steps=60", "trainer.eval_every=20", "trainer.eval_batches=4"]
    final = run(make_config(*T5, *steps, tiny=False), tmp_path)
    records = read_metrics(tmp_path)
    train = [r for r in records if "lr" in r]
    first, last = sum(r["loss"] for r in train[:5]) / 5, sum(r["loss"] for r in train[-10:]) / 10
    assert last < first - 1.0, (first, last)
    saved = OmegaConf.load(tmp_path / "checkpoints" / "last" / "config.yaml")
    assert saved.data.tokenizer.kind == "t5_unigram" and saved.model.vocab_size == 300
    # Evaluation decodes the same corrupted validation windows each time: well below the uniform ln(V) at the end.
    evals = [r["eval_span_corruption_loss"] for r in records if "eval_loss" in r]
    assert len(evals) == 3 and evals[-1] < evals[0] and evals[-1] < math.log(300) - 1.0, evals
    assert final["eval_span_corruption_perplexity"] == pytest.approx(math.exp(evals[-1]), rel=1e-6)


@pytest.mark.slow
def test_resume_continues_exactly(make_config, tmp_path):
    common = [*T5, "trainer.save_every=4", "optimizer.total_steps=8", "trainer.grad_accum_steps=2", "model.dropout=0.1"]
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    run(make_config(*common, "trainer.max_steps=8", tiny=False), straight)
    run(make_config(*common, "trainer.max_steps=4", tiny=False), interrupted)
    run(make_config(*common, "trainer.max_steps=8", "trainer.resume=auto", tiny=False), interrupted)
    a, b = read_metrics(straight), read_metrics(interrupted)
    assert [r["step"] for r in b] == list(range(1, 9))
    assert [r["loss"] for r in a] == [r["loss"] for r in b]
    from safetensors.torch import load_file

    wa = load_file(straight / "checkpoints" / "last" / "model.safetensors")
    wb = load_file(interrupted / "checkpoints" / "last" / "model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def test_span_corruption_on_an_encoder_only_model_names_the_capability(make_config, tmp_path):
    with pytest.raises(ConfigError, match="objective=span_corruption needs a model that is encoder_decoder; "):
        run(make_config("objective=span_corruption"), tmp_path)


def test_a_vocabulary_without_sentinels_is_refused(make_config, tmp_path):
    # T5 over RoBERTa's byte-level BPE: it has </s> and <pad>, but no <extra_id_N>.
    with pytest.raises(DataError, match=r"has no sentinel tokens \(<extra_id_0>, <extra_id_1>, ...\)"):
        run(make_config(*T5, "data.tokenizer.kind=bpe", "trainer.max_steps=1", tiny=False), tmp_path)
