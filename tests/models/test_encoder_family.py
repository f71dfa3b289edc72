"""ALBERT's sharing (parameter counts per mode), ELECTRA's pooler-less discriminator, RoBERTa's position offset."""

import pytest
import torch

from plm_toolkit.models.albert import Albert, AlbertConfig
from plm_toolkit.models.base import POOLER
from plm_toolkit.models.bert import Bert, BertConfig
from plm_toolkit.models.electra import Electra, ElectraConfig
from tests.config.test_compose import composed

VOCAB, HIDDEN, INTERMEDIATE, LAYERS, HEADS, EMBEDDING, POSITIONS = 99, 36, 37, 3, 3, 17, 40


def albert(sharing: str) -> Albert:
    return Albert(
        AlbertConfig(
            vocab_size=VOCAB,
            hidden_size=HIDDEN,
            num_layers=LAYERS,
            num_heads=HEADS,
            intermediate_size=INTERMEDIATE,
            embedding_size=EMBEDDING,
            max_position_embeddings=POSITIONS,
            sharing=sharing,
        )
    ).eval()


@pytest.mark.parametrize("sharing", ["none", "all", "attention", "ffn"])
def test_albert_parameter_count_per_sharing_mode(sharing):
    v, e, h, i, p, layers = VOCAB, EMBEDDING, HIDDEN, INTERMEDIATE, POSITIONS, LAYERS
    embeddings = (v + p + 2) * e + 2 * e  # token, position, 2 segment rows; LayerNorm over E
    projection = e * h + h  # factorized embedding: E -> H (section 3.1)
    attention = 4 * (h * h + h) + 2 * h  # q, k, v, output + its LayerNorm
    ffn = (h * i + i) + (i * h + h) + 2 * h  # two linear maps + their LayerNorm
    pooler = h * h + h
    copies = {"none": (layers, layers), "all": (1, 1), "attention": (1, layers), "ffn": (layers, 1)}[sharing]
    expected = embeddings + projection + copies[0] * attention + copies[1] * ffn + pooler
    assert albert(sharing).num_parameters() == expected


def test_albert_shared_layers_are_one_module_and_train_once():
    model = albert("attention")
    layers = model.encoder.layers
    assert layers[0].attention is layers[2].attention and layers[0].feed_forward is not layers[2].feed_forward
    ids = torch.randint(1, VOCAB, (2, 9))
    out = model.train()(ids)
    (out.hidden.sum() + out.pooled.sum()).backward()
    assert all(p.grad is not None for p in model.parameters())
    assert len(albert("all").encoder.layers) == 1


def test_albert_all_sharing_applies_one_layer_num_layers_times():
    model = albert("all")
    ids = torch.randint(1, VOCAB, (2, 9))
    out = model(ids, output_all_hidden=True)
    assert len(out.all_hidden) == LAYERS + 1 and out.hidden.shape == (2, 9, HIDDEN)
    x = model.embed(ids)
    for _ in range(LAYERS):
        x = model.encoder.layers[0](x)
    torch.testing.assert_close(out.hidden, x)


def test_electra_has_no_pooler_and_projects_a_narrow_embedding():
    config = ElectraConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, num_layers=2, num_heads=HEADS, embedding_size=EMBEDDING
    )
    model = Electra(config).eval()
    assert POOLER not in Electra.capabilities and model.pooler is None
    assert model.embeddings.word_embeddings.weight.shape == (VOCAB, EMBEDDING)
    out = model(torch.randint(1, VOCAB, (2, 7)))
    assert out.pooled is None and out.hidden.shape == (2, 7, HIDDEN)
    assert composed("model=electra_base").objective.name == "rtd"
    assert composed("model=albert_base").objective.name == "mlm_sop"


def test_roberta_position_offset_shifts_the_table():
    config = BertConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, num_layers=1, num_heads=HEADS, intermediate_size=INTERMEDIATE,
        max_position_embeddings=POSITIONS + 2, type_vocab_size=1, position_offset=2, pad_token_id=1,
    )  # fmt: skip
    model = Bert(config).eval()
    ids = torch.randint(2, VOCAB, (2, 8))
    shifted = model.embeddings.position_embeddings.weight[2:10]
    unshifted = model.embeddings.word_embeddings(ids) + shifted + model.embeddings.token_type_embeddings.weight[0]
    torch.testing.assert_close(model.embeddings(ids), model.embeddings.dropout(model.embeddings.layer_norm(unshifted)))
    torch.testing.assert_close(model(ids).hidden, model(ids, position_ids=torch.arange(8).expand(2, 8)).hidden)
    model(torch.ones(1, POSITIONS, dtype=torch.long))  # the whole table minus the offset fits
    with pytest.raises(ValueError, match="position_offset 2"):
        model(torch.ones(1, POSITIONS + 1, dtype=torch.long))
