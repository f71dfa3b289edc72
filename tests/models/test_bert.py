import pytest
import torch

from plm_toolkit.core.errors import ConfigError
from plm_toolkit.core.registry import MODELS
from plm_toolkit.models.base import BIDIRECTIONAL, POOLER, SEGMENTS
from plm_toolkit.models.bert import Bert, BertConfig
from tests.config.test_compose import composed

# Odd sizes so that no two dimensions can be confused.
VOCAB, HIDDEN, INTERMEDIATE, LAYERS, HEADS, POSITIONS = 99, 32, 37, 2, 4, 40


def tiny_config(**overrides) -> BertConfig:
    fields = dict(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_layers=LAYERS,
        num_heads=HEADS,
        intermediate_size=INTERMEDIATE,
        max_position_embeddings=POSITIONS,
    )
    return BertConfig(**(fields | overrides))


@pytest.fixture
def model() -> Bert:
    return Bert(tiny_config()).eval()


def test_registered_with_paper_objective():
    entry = MODELS.get("bert")
    assert entry.builder is Bert and entry.config_cls is BertConfig
    assert composed("model=bert_base").objective.name == "mlm_nsp"
    assert {BIDIRECTIONAL, SEGMENTS, POOLER} <= Bert.capabilities


def test_output_shapes(model):
    ids = torch.randint(1, VOCAB, (3, 11))
    out = model(ids, torch.ones_like(ids), output_all_hidden=True)
    assert out.hidden.shape == (3, 11, HIDDEN)
    assert out.pooled.shape == (3, HIDDEN)
    assert len(out.all_hidden) == LAYERS + 1
    assert torch.equal(out.all_hidden[-1], out.hidden)
    assert model.input_embeddings is model.embeddings.word_embeddings


def test_attention_mask_hides_padding(model):
    ids = torch.randint(1, VOCAB, (2, 9))
    mask = torch.ones_like(ids)
    mask[0, 6:] = 0
    other = ids.clone()
    other[0, 6:] = torch.randint(1, VOCAB, (3,))
    first, second = model(ids, mask).hidden, model(other, mask).hidden
    torch.testing.assert_close(first[0, :6], second[0, :6], rtol=0, atol=1e-6)
    torch.testing.assert_close(first[1], second[1], rtol=0, atol=0)
    # Without the mask the padding is read, so the test above is not vacuous.
    assert not torch.allclose(model(ids).hidden[0, :6], model(other).hidden[0, :6])


def test_token_types_matter(model):
    ids = torch.randint(1, VOCAB, (2, 8))
    types = torch.zeros_like(ids)
    types[:, 4:] = 1
    assert not torch.allclose(model(ids).hidden, model(ids, token_type_ids=types).hidden)
    # Default segments are all sentence A.
    torch.testing.assert_close(model(ids).hidden, model(ids, token_type_ids=torch.zeros_like(ids)).hidden)


def test_default_positions_are_a_range(model):
    ids = torch.randint(1, VOCAB, (2, 8))
    positions = torch.arange(8).expand(2, 8)
    torch.testing.assert_close(model(ids).hidden, model(ids, position_ids=positions).hidden)


def test_parameter_count_matches_formula(model):
    h, i, v = HIDDEN, INTERMEDIATE, VOCAB
    embeddings = (v + POSITIONS + 2) * h + 2 * h
    layer = 4 * (h * h + h) + (h * i + i) + (i * h + h) + 2 * 2 * h
    pooler = h * h + h
    assert model.num_parameters() == embeddings + LAYERS * layer + pooler


def test_init_follows_bert(model):
    assert torch.all(model.embeddings.word_embeddings.weight[0] == 0)  # padding row
    assert torch.all(model.encoder.layers[0].attention.query.bias == 0)
    assert torch.all(model.encoder.layers[1].output_layer_norm.weight == 1)
    std = model.encoder.layers[0].feed_forward.intermediate.weight.std().item()
    assert 0.015 < std < 0.025


def test_eval_is_deterministic_and_train_uses_dropout(model):
    ids = torch.randint(1, VOCAB, (2, 8))
    assert torch.equal(model(ids).hidden, model(ids).hidden)
    model.train()
    assert not torch.equal(model(ids).hidden, model(ids).hidden)


def test_gradients_reach_every_parameter(model):
    ids = torch.randint(1, VOCAB, (2, 8))
    out = model.train()(ids, torch.ones_like(ids), torch.ones_like(ids))
    (out.hidden.sum() + out.pooled.sum()).backward()
    assert all(p.grad is not None for p in model.parameters())


def test_rejects_missing_vocab_size_and_too_long_input():
    with pytest.raises(ConfigError, match="vocab_size"):
        Bert(tiny_config(vocab_size=None))
    with pytest.raises(ConfigError, match="num_heads"):
        Bert(tiny_config(num_heads=5))
    with pytest.raises(ValueError, match="max_position_embeddings"):
        Bert(tiny_config())(torch.ones(1, POSITIONS + 1, dtype=torch.long))
