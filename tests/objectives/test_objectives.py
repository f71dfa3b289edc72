"""MLM, NSP and MLM+NSP on hand-built batches over a tiny odd-sized backbone."""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass
from enum import Enum

import pytest
import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from torch import nn

from plm_toolkit.core.choices import choices
from plm_toolkit.core.errors import ConfigError
from plm_toolkit.core.registry import OBJECTIVES
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.models import bert
from plm_toolkit.models.base import BIDIRECTIONAL, POOLER, SEGMENTS, Backbone, Representations
from plm_toolkit.objectives.base import normalized_loss
from plm_toolkit.objectives.masking import IGNORE_INDEX
from plm_toolkit.objectives.mlm import MaskedLanguageModeling, MlmConfig
from plm_toolkit.objectives.mlm_nsp import MlmNsp, MlmNspConfig
from plm_toolkit.objectives.nsp import NextSentencePrediction, NspConfig

CONFIGS = os.path.join(os.path.dirname(__file__), "..", "..", "configs")
HiddenAct = choices("HiddenAct", "gelu", "gelu_tanh", "relu")
# Odd sizes so that a swapped dimension cannot pass by accident.
VOCAB = Vocab(size=99, pad_id=0, unk_id=7, cls_id=40, sep_id=41, mask_id=98)
HIDDEN = 32


@dataclass
class StandInConfig:
    vocab_size: int = 99
    hidden_size: int = HIDDEN
    hidden_act: Enum = HiddenAct.gelu
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02


class StandIn(Backbone):
    """Embedding (words + segments) -> linear; pooled = tanh(linear(first position)). Counts its forward calls."""

    capabilities = frozenset({BIDIRECTIONAL, POOLER, SEGMENTS})

    def __init__(self, config: StandInConfig):
        super().__init__()
        self.config = config
        self.words = nn.Embedding(config.vocab_size, config.hidden_size)
        self.segments = nn.Embedding(2, config.hidden_size)
        self.mix = nn.Linear(config.hidden_size, config.hidden_size)
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size)
        self.calls = 0

    @property
    def input_embeddings(self) -> nn.Embedding:
        return self.words

    def forward(self, input_ids, attention_mask, token_type_ids=None) -> Representations:
        self.calls += 1
        embedded = self.words(input_ids)
        if token_type_ids is not None:
            embedded = embedded + self.segments(token_type_ids)
        hidden = torch.tanh(self.mix(embedded)) * attention_mask.unsqueeze(-1)  # (B, T, H)
        return Representations(hidden=hidden, pooled=torch.tanh(self.pooler(hidden[:, 0])))


def bert_backbone() -> Backbone:
    config = bert.BertConfig(
        vocab_size=99, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=37, max_position_embeddings=40
    )
    return bert.Bert(config).eval()


BACKBONES = {"stand_in": lambda: StandIn(StandInConfig()), "bert": bert_backbone}


@pytest.fixture(params=sorted(BACKBONES))
def model(request) -> Backbone:
    return BACKBONES[request.param]()


def pair_batch(rows: int = 6, seq_len: int = 24, seed: int = 0) -> dict[str, torch.Tensor]:
    """A collated sentence-pair batch of varied lengths: [CLS] A [SEP] B [SEP] [PAD]..., with NSP labels."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(6, seq_len + 1, (rows,), generator=generator).tolist()
    input_ids = torch.randint(42, 98, (rows, seq_len), generator=generator)  # no special id in 42..97
    special = torch.zeros(rows, seq_len, dtype=torch.bool)
    token_types = torch.zeros(rows, seq_len, dtype=torch.long)
    for row, length in enumerate(lengths):
        split = length // 2
        input_ids[row, [0, split, length - 1]] = torch.tensor([VOCAB.cls_id, VOCAB.sep_id, VOCAB.sep_id])
        input_ids[row, length:] = VOCAB.pad_id
        special[row, [0, split, length - 1]] = True
        special[row, length:] = True
        token_types[row, split + 1 : length] = 1
    return {
        "input_ids": input_ids,
        "attention_mask": (~special | (input_ids != VOCAB.pad_id)).long(),
        "token_type_ids": token_types,
        "special_tokens_mask": special,
        "next_sentence_label": torch.randint(2, (rows,), generator=generator),
    }


def masked(objective, batch: dict[str, torch.Tensor], seed: int = 0) -> dict[str, torch.Tensor]:
    return objective.batch_transform()(batch, range(seed, seed + batch["input_ids"].shape[0]))


def test_mlm_gathered_loss_equals_full_vocab_cross_entropy(model):
    objective = MaskedLanguageModeling(MlmConfig(mask_prob=0.3), model, VOCAB)
    batch = masked(objective, pair_batch())
    out = objective(model, batch)
    # Reference: the head over every position, then cross-entropy ignoring non-targets.
    reps = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    logits = objective.head(reps.hidden, model.input_embeddings.weight)  # (B, T, V)
    labels = batch["mlm_labels"]
    expected = F.cross_entropy(logits.reshape(-1, VOCAB.size), labels.reshape(-1), reduction="sum")
    torch.testing.assert_close(out.loss_sums["mlm"], expected)
    targets = labels != IGNORE_INDEX
    assert out.metrics["mlm_correct"].item() == (logits.argmax(-1)[targets] == labels[targets]).sum().item()
    assert objective.target_counts(batch) == {"mlm": int(targets.sum())}
    assert set(out.metrics) == set(objective.metric_denominators)


def test_mlm_decoder_is_tied_to_the_input_embedding(model):
    objective = MaskedLanguageModeling(MlmConfig(), model, VOCAB)
    batch = masked(objective, pair_batch())
    objective(model, batch).loss_sums["mlm"].backward()
    embedding = model.input_embeddings.weight
    assert all(p is not embedding for p in objective.parameters())
    # Rows of ids that never occur in the input still get a gradient: it flows through the tied decoder.
    unseen = sorted(set(range(VOCAB.size)) - set(batch["input_ids"].flatten().tolist()))
    assert embedding.grad[unseen].abs().sum() > 0
    assert sorted(objective.state_dict()) == [
        "head.bias",
        "head.dense.bias",
        "head.dense.weight",
        "head.layer_norm.bias",
        "head.layer_norm.weight",
    ]


def test_mlm_head_init_and_activation_enum():
    objective = MaskedLanguageModeling(MlmConfig(), StandIn(StandInConfig(hidden_act=HiddenAct.relu)), VOCAB)
    head = objective.head
    assert head.act is F.relu
    assert torch.all(head.bias == 0) and torch.all(head.dense.bias == 0)
    assert torch.all(head.layer_norm.weight == 1) and torch.all(head.layer_norm.bias == 0)
    assert head.dense.weight.std().item() == pytest.approx(0.02, rel=0.15)


def test_nsp_loss_counts_and_metrics(model):
    objective = NextSentencePrediction(NspConfig(), model, VOCAB)
    batch = pair_batch()
    assert objective.batch_transform() is None
    out = objective(model, batch)
    logits = objective.head(model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).pooled)
    gold = batch["next_sentence_label"]
    torch.testing.assert_close(out.loss_sums["nsp"], F.cross_entropy(logits, gold, reduction="sum"))
    assert out.metrics["nsp_correct"].item() == (logits.argmax(-1) == gold).sum().item()
    assert objective.target_counts(batch) == {"nsp": 6}
    assert sorted(objective.state_dict()) == ["head.bias", "head.weight"]


@pytest.mark.parametrize("nsp_weight", [1.0, 0.5])
def test_mlm_nsp_is_mlm_plus_nsp_with_one_forward(model, nsp_weight):
    both = MlmNsp(MlmNspConfig(nsp_weight=nsp_weight), model, VOCAB)
    mlm = MaskedLanguageModeling(MlmConfig(), model, VOCAB)
    nsp = NextSentencePrediction(NspConfig(), model, VOCAB)
    mlm.load_state_dict(both.mlm.state_dict())
    nsp.load_state_dict(both.nsp.state_dict())
    batch = masked(both, pair_batch())
    assert torch.equal(batch["mlm_labels"], masked(mlm, pair_batch())["mlm_labels"])

    if isinstance(model, StandIn):
        model.calls = 0
    out = both(model, batch)
    if isinstance(model, StandIn):
        assert model.calls == 1
    torch.testing.assert_close(out.loss_sums["mlm"], mlm(model, batch).loss_sums["mlm"])
    torch.testing.assert_close(out.loss_sums["nsp"], nsp_weight * nsp(model, batch).loss_sums["nsp"])
    assert set(out.metrics) == {"mlm_correct", "nsp_correct"}
    assert both.metric_denominators == {"mlm_correct": "mlm", "nsp_correct": "nsp"}
    counts = both.target_counts(batch)
    assert counts == {"mlm": int((batch["mlm_labels"] != IGNORE_INDEX).sum()), "nsp": 6}
    assert both.required_capabilities == {BIDIRECTIONAL, POOLER, SEGMENTS}
    data = OmegaConf.create({"packing": "auto", "max_seq_len": 32})
    assert MlmNsp.data_plan(MlmNspConfig(), data, None).layout == "sentence_pairs"
    assert MaskedLanguageModeling.data_plan(MlmConfig(), data, None).layout == "full_sentences"


def test_mlm_nsp_state_dict_keys():
    both = MlmNsp(MlmNspConfig(), StandIn(StandInConfig()), VOCAB)
    assert sorted(both.state_dict()) == [
        "mlm.head.bias",
        "mlm.head.dense.bias",
        "mlm.head.dense.weight",
        "mlm.head.layer_norm.bias",
        "mlm.head.layer_norm.weight",
        "nsp.head.bias",
        "nsp.head.weight",
    ]


def test_loss_sums_add_up_over_micro_batches():
    """The sum contract: two halves give the same normalized loss as the whole batch (gradient accumulation)."""
    model = StandIn(StandInConfig())
    objective = MlmNsp(MlmNspConfig(), model, VOCAB)
    batch = masked(objective, pair_batch(rows=8))
    # Row slices of every per-row field; the flat target positions (a whole-batch field) are left to the objective.
    rows = {key: value for key, value in batch.items() if key != "mlm_positions"}
    halves = [{key: value[part] for key, value in rows.items()} for part in (slice(0, 3), slice(3, 8))]
    whole = objective(model, batch)
    counts = objective.target_counts(batch)
    split = [objective(model, half) for half in halves]
    for name in ("mlm", "nsp"):
        torch.testing.assert_close(whole.loss_sums[name], sum(part.loss_sums[name] for part in split))
    assert sum(objective.target_counts(half)["mlm"] for half in halves) == counts["mlm"]
    assert normalized_loss(whole, counts).ndim == 0


def test_batch_without_targets_gives_zero_mlm_loss():
    model = StandIn(StandInConfig())
    objective = MaskedLanguageModeling(MlmConfig(), model, VOCAB)
    batch = pair_batch()
    batch["mlm_labels"] = torch.full_like(batch["input_ids"], IGNORE_INDEX)
    out = objective(model, batch)
    assert out.loss_sums["mlm"].item() == 0.0 and out.metrics["mlm_correct"].item() == 0
    out.loss_sums["mlm"].backward()


@pytest.mark.parametrize("name", ["mlm", "mlm_nsp"])
def test_batch_transform_pickles_and_round_trips(name):
    entry = OBJECTIVES.get(name)
    objective = entry.builder(entry.config_cls(), StandIn(StandInConfig()), VOCAB)
    transform = objective.batch_transform()
    restored = pickle.loads(pickle.dumps(transform))
    batch = pair_batch()
    assert torch.equal(restored(batch, range(6))["input_ids"], transform(batch, range(6))["input_ids"])


@pytest.mark.parametrize("name", ["mlm", "nsp", "mlm_nsp"])
def test_yaml_presets_compose_and_build(name):
    with initialize_config_dir(config_dir=os.path.abspath(CONFIGS), version_base=None):
        cfg = compose(overrides=[f"+objective={name}"]).objective
    assert cfg.name == name
    objective = OBJECTIVES.get(name).builder(cfg, StandIn(StandInConfig()), VOCAB)
    assert isinstance(objective, {"mlm": MaskedLanguageModeling, "nsp": NextSentencePrediction}.get(name, MlmNsp))
    assert OmegaConf.to_object(cfg) == OBJECTIVES.get(name).config_cls()


@pytest.mark.parametrize(
    ("override", "key"),
    [("objective.mask_prob=1.5", "objective.mask_prob"), ("objective.nsp_weight=-1", "objective.nsp_weight")],
)
def test_bad_values_raise_config_error_naming_the_key(override, key):
    with initialize_config_dir(config_dir=os.path.abspath(CONFIGS), version_base=None):
        cfg = compose(overrides=["+objective=mlm_nsp", override]).objective
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        OBJECTIVES.get("mlm_nsp").builder(cfg, StandIn(StandInConfig()), VOCAB)
