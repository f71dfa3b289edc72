"""Causal LM objective: tied or adaptive softmax, next-token targets, memory carried between batches."""

import math

import pytest
import torch
import torch.nn.functional as F

from plm_toolkit.core.errors import ConfigError
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.models.transformer_xl import TransformerXL, TransformerXLConfig
from plm_toolkit.objectives.clm import CausalLanguageModeling, ClmConfig

VOCAB = Vocab(size=53, pad_id=0, unk_id=1, cls_id=2, sep_id=3, mask_id=4)


def setup(**config):
    torch.manual_seed(0)
    model = TransformerXL(
        TransformerXLConfig(
            vocab_size=53, hidden_size=36, num_layers=2, num_heads=3, head_size=11, intermediate_size=37, mem_len=8
        )
    )
    return model, CausalLanguageModeling(ClmConfig(**config), model, VOCAB)


def batch(seed=0):
    ids = torch.randint(5, 53, (3, 9), generator=torch.Generator().manual_seed(seed))
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def test_loss_is_next_token_cross_entropy_and_memory_is_carried():
    model, objective = setup()
    model.eval(), objective.eval()
    first = batch(0)
    out = objective(model, first)
    reps = model(first["input_ids"][:, :-1])
    logits = F.linear(reps.hidden, model.word_embeddings.weight, objective.bias)
    expected = F.cross_entropy(logits.reshape(-1, 53), first["input_ids"][:, 1:].reshape(-1), reduction="sum")
    torch.testing.assert_close(out.loss_sums["clm"], expected)
    assert objective.target_counts(first) == {"clm": 24}
    torch.testing.assert_close(out.metrics["clm_bits_per_token"], expected / math.log(2))
    # The second batch reads the first's memory: its loss differs from a fresh start on the same tokens.
    second = batch(1)
    with_memory = objective(model, second).loss_sums["clm"]
    objective.eval()  # entering evaluation drops the evaluation memory
    fresh = objective(model, second).loss_sums["clm"]
    assert not torch.allclose(with_memory, fresh)
    # A batch that starts its streams again (a new pass over the text) does not read the memory either.
    restart = {**second, "stream_start": torch.ones(3, dtype=torch.bool)}
    torch.testing.assert_close(objective(model, restart).loss_sums["clm"], fresh)


def test_training_memory_survives_evaluation_and_round_trips():
    model, objective = setup()
    objective.train()
    objective(model, batch(0))
    state = objective.carried_state()
    assert sorted(state) == ["memory.0", "memory.1"] and state["memory.0"].shape == (3, 8, 36)
    objective.eval()
    objective(model, batch(1))
    objective.train()
    assert torch.equal(objective.carried_state()["memory.0"], state["memory.0"])
    _, fresh = setup()
    fresh.load_carried_state(state)
    assert torch.equal(fresh.carried_state()["memory.1"], state["memory.1"])


def test_adaptive_softmax_loss():
    model, objective = setup(adaptive_softmax_cutoffs=[10, 30], adaptive_softmax_div_value=2.0)
    model.eval(), objective.eval()
    b = batch(0)
    out = objective(model, b)
    hidden = model(b["input_ids"][:, :-1]).hidden.reshape(-1, 36)
    log_probs = objective.adaptive.log_prob(hidden)  # (N, V), a proper distribution
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(24))
    expected = -log_probs.gather(1, b["input_ids"][:, 1:].reshape(-1, 1)).sum()
    torch.testing.assert_close(out.loss_sums["clm"], expected, atol=1e-4, rtol=1e-5)


def test_adaptive_softmax_config_is_checked():
    with pytest.raises(ConfigError, match="increasing"):
        CausalLanguageModeling.check_config(ClmConfig(adaptive_softmax_cutoffs=[30, 10]))
    with pytest.raises(ConfigError, match="below the vocabulary size 53"):
        setup(adaptive_softmax_cutoffs=[10, 60])
