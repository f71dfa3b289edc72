"""A few-step run per encoder family whose loss falls, objectives across backbones, and ELECTRA's exact resume."""

import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file

from plm_toolkit.commands.train import run
from plm_toolkit.config.validate import validate
from plm_toolkit.core.errors import ConfigError

from .conftest import read_metrics

# Odd sizes on top of each family's tiny preset (TINY's model=bert_tiny is replaced by the family's).
FAMILY = {
    "roberta": ["model=roberta_tiny", "model.max_position_embeddings=66"],
    "albert": ["model=albert_tiny", "model.embedding_size=17", "model.max_position_embeddings=64"],
    "electra": ["model=electra_tiny", "model.embedding_size=17", "model.max_position_embeddings=64"],
}
ODD = ["model.hidden_size=36", "model.num_heads=3", "model.intermediate_size=37"]


def family_config(make_config, family, *overrides):
    return make_config(*FAMILY[family], *ODD, *overrides)


def train_losses(run_dir):
    return [r for r in read_metrics(run_dir) if "lr" in r]


@pytest.mark.slow
@pytest.mark.parametrize(
    "family,components",
    [
        ("roberta", {"loss", "mlm_accuracy"}),
        ("albert", {"mlm_loss", "sop_loss", "sop_accuracy"}),
        ("electra", {"mlm_loss", "rtd_loss", "rtd_accuracy"}),
    ],
)
def test_paper_objective_loss_falls(make_config, tmp_path, family, components):
    cfg = family_config(make_config, family, "trainer.max_steps=40", "optimizer.lr=3e-3", "trainer.save_every=0")
    run(cfg, tmp_path)
    train = train_losses(tmp_path)
    assert components <= set(train[0])
    first, last = sum(r["loss"] for r in train[:5]) / 5, sum(r["loss"] for r in train[-5:]) / 5
    assert last < first - 0.2, (first, last)


def test_roberta_trains_a_byte_level_bpe_and_packs_full_sentences(make_config, tmp_path):
    cfg = family_config(make_config, "roberta", "trainer.max_steps=2")
    assert cfg.objective.name == "mlm"
    run(cfg, tmp_path)
    saved = OmegaConf.load(tmp_path / "checkpoints" / "last" / "config.yaml")
    assert saved.data.tokenizer.kind == "bpe" and saved.model.pad_token_id == 1
    tokenizer = (tmp_path / "checkpoints" / "last" / "tokenizer.json").read_text()
    assert '"<s>"' in tokenizer and "ByteLevel" in tokenizer
    weights = load_file(tmp_path / "checkpoints" / "last" / "model.safetensors")
    assert weights["embeddings.token_type_embeddings.weight"].shape[0] == 1


def test_electra_resume_is_exact(make_config, tmp_path):
    common = ["trainer.save_every=4", "optimizer.total_steps=8", "trainer.seed=3", "optimizer.lr=2e-3"]
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    run(family_config(make_config, "electra", "trainer.max_steps=8", *common), straight)
    run(family_config(make_config, "electra", "trainer.max_steps=4", *common), interrupted)
    run(family_config(make_config, "electra", "trainer.max_steps=8", *common), interrupted)
    a, b = train_losses(straight), train_losses(interrupted)
    assert [r["step"] for r in b] == list(range(1, 9))
    assert [(r["mlm_loss"], r["rtd_loss"]) for r in a] == [(r["mlm_loss"], r["rtd_loss"]) for r in b]
    for name in ("model.safetensors", "objective.safetensors"):  # discriminator, and generator + heads
        wa = load_file(straight / "checkpoints" / "last" / name)
        wb = load_file(interrupted / "checkpoints" / "last" / name)
        assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa), name
    generator = load_file(straight / "checkpoints" / "last" / "objective.safetensors")
    assert any(k.startswith("generator.encoder.") for k in generator)
    assert not any("word_embeddings" in k for k in generator)  # shared with the discriminator, saved once


@pytest.mark.parametrize(
    "overrides",
    [
        ["model=albert_tiny", "objective=rtd"],
        ["model=bert_tiny", "objective=mlm_sop"],
        ["model=roberta_tiny", "objective=mlm", "objective.masking=whole_word", "objective.dupe_factor=2"],
        ["model=electra_tiny", "objective=mlm", "objective.masking=ngram"],
    ],
)
def test_objectives_combine_across_backbones(make_config, tmp_path, overrides):
    cfg = make_config(*overrides, "trainer.max_steps=2", "model.max_position_embeddings=66")
    run(cfg, tmp_path)
    assert [r["step"] for r in train_losses(tmp_path)] == [1, 2]


@pytest.mark.parametrize(
    "overrides,expected",
    [
        (["model=electra_tiny", "objective=mlm_sop"], "objective=mlm_sop needs a model that is pooler"),
        (["model=electra_tiny", "objective=nsp"], "needs a model that is pooler; model=electra is not"),
        (["model=albert_tiny", "data.packing=sentence_pairs"], "objective=mlm_sop needs in-order segment pairs"),
        (["model=roberta_tiny", "objective=mlm_nsp"], "model.type_vocab_size=1 has one \\(RoBERTa's\\)"),
        (["model=roberta_tiny", "data.max_seq_len=513"], "exceeds model.max_position_embeddings=514 - model.position"),
        (["objective=rtd", "objective.generator_hidden_fraction=0"], "generator_hidden_fraction must lie in"),
        (["objective=mlm", "objective.max_ngram=0"], "objective.max_ngram must be at least 1"),
        (["objective=mlm", "objective.dupe_factor=-1"], "objective.dupe_factor must be 0 \\(dynamic masking\\)"),
    ],
)
def test_impossible_combinations_stop_at_validation(make_config, overrides, expected):
    with pytest.raises(ConfigError, match=expected):
        validate(make_config(*overrides, tiny=False))
