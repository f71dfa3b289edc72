"""Sentence-order prediction (Lan et al. 2020, ALBERT section 4.1 / 3.1 "inter-sentence coherence loss").

The data gives two consecutive segments of one document in order (``data.packing=segment_pairs``); this
objective's batch transform swaps them in a random half of the rows, and a two-way classifier over the pooled
summary says whether they were swapped. Unlike NSP's random second segment, the negative shares the topic of the
positive, so only discourse coherence tells them apart. Labels follow Hugging Face: 0 = in order, 1 = swapped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from plm_toolkit.core.errors import ConfigError
from plm_toolkit.core.registry import OBJECTIVES
from plm_toolkit.data.layouts.order import mix_seed
from plm_toolkit.data.layouts.plan import Layout
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.models.base import BIDIRECTIONAL, POOLER, SEGMENTS, Representations
from plm_toolkit.objectives.base import BatchTransform, Objective, ObjectiveOutput
from plm_toolkit.objectives.mlm import encode

# Seeds of the swap draw are derived from the row's seed on their own stream, so adding SOP to MLM leaves the
# masking draw of every row unchanged.
_SWAP_STREAM = 7


@dataclass
class SopConfig:
    # Registry name of the objective.
    name: str = "sop"
    # Probability that a row's two segments are swapped (the negative class); ALBERT: 0.5.
    swap_prob: float = 0.5


def check_swap_prob(config) -> None:
    if not 0.0 <= config.swap_prob <= 1.0:
        raise ConfigError(f"objective.swap_prob must lie in [0, 1], got {config.swap_prob}")


class SegmentSwap:
    """Batch transform: ``[CLS] A [SEP] B [SEP]`` -> ``[CLS] B [SEP] A [SEP]`` with probability ``swap_prob`` per
    row (segment ids follow the new order), plus ``sop_label`` (B,): 1 where swapped.

    Segment A is where ``token_type_ids`` is 0 (its [CLS] and [SEP] included). A picklable plain class.
    """

    def __init__(self, swap_prob: float = 0.5):
        self.swap_prob = swap_prob

    def __call__(self, batch: dict[str, torch.Tensor], seeds: Sequence[int]) -> dict[str, torch.Tensor]:
        ids, types = batch["input_ids"].clone(), batch["token_type_ids"].clone()
        special = batch["special_tokens_mask"].clone()
        units = batch["units"].clone() if "units" in batch else None
        labels = torch.zeros(ids.shape[0], dtype=torch.long)
        lengths = batch["attention_mask"].sum(dim=1).tolist()
        for row, (seed, length) in enumerate(zip(seeds, lengths, strict=True)):
            generator = torch.Generator().manual_seed(mix_seed(int(seed), 0, _SWAP_STREAM))
            if float(torch.rand(1, generator=generator)) >= self.swap_prob:
                continue
            a_end = int((batch["token_type_ids"][row, :length] == 0).sum()) - 1  # index of the first [SEP]
            a = torch.arange(1, a_end)  # segment A's positions
            b = torch.arange(a_end + 1, length - 1)  # segment B's positions
            # (L,) source position of every new position: [CLS] B [SEP] A [SEP]
            order = torch.cat([torch.tensor([0]), b, torch.tensor([a_end]), a, torch.tensor([length - 1])])
            ids[row, :length] = batch["input_ids"][row, order]
            special[row, :length] = batch["special_tokens_mask"][row, order]
            if units is not None:  # whole-word masking's join codes follow their tokens
                units[row, :length] = batch["units"][row, order]
            types[row, :length] = 0
            types[row, len(b) + 2 : length] = 1
            labels[row] = 1
        swapped = {"input_ids": ids, "token_type_ids": types, "special_tokens_mask": special, "sop_label": labels}
        return {**batch, **swapped, **({} if units is None else {"units": units})}


@OBJECTIVES.register("sop", SopConfig)
class SentenceOrderPrediction(Objective):
    """SOP over ``sop_label``; its metric sum ``sop_correct`` is logged as ``sop_accuracy``."""

    head_group = "sop"
    required_capabilities = frozenset({BIDIRECTIONAL, POOLER, SEGMENTS})
    natural_layout = Layout.segment_pairs
    metric_denominators = {"sop_correct": "sop"}

    def __init__(self, config: SopConfig, model: nn.Module, vocab: Vocab):
        super().__init__()
        self.check_config(config)
        # Named after HF's sop_classifier.classifier: a linear layer over the pooled summary.
        self.head = nn.Linear(model.config.hidden_size, 2)
        nn.init.normal_(self.head.weight, mean=0.0, std=getattr(model.config, "initializer_range", 0.02))
        nn.init.zeros_(self.head.bias)
        self.swap = SegmentSwap(config.swap_prob)

    @classmethod
    def check_config(cls, config) -> None:
        check_swap_prob(config)

    def batch_transform(self) -> BatchTransform:
        return self.swap

    def target_counts(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        return {"sop": int(batch["sop_label"].shape[0])}

    def forward(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        return self.loss_from(encode(model, batch), batch, model)

    def loss_from(self, reps: Representations, batch: dict[str, torch.Tensor], model: nn.Module) -> ObjectiveOutput:
        gold = batch["sop_label"]  # (B,)
        logits = self.head(reps.pooled)  # (B, 2)
        loss_sum = F.cross_entropy(logits, gold, reduction="sum")
        correct = (logits.detach().argmax(dim=-1) == gold).sum()
        return ObjectiveOutput(loss_sums={"sop": loss_sum}, metrics={"sop_correct": correct})
