"""Span corruption, T5's pretraining objective (Raffel et al. 2020, section 3.1.4): the encoder reads a window
with ~15% of its tokens dropped in spans of mean length 3, each span replaced by one sentinel; the decoder writes
the sentinels followed by the spans they stand for (``span_noise.py`` draws them as T5 does).

The data are windows of one token stream whose length is chosen so that the corrupted input, EOS included, is
exactly ``data.max_seq_len`` tokens (T5's ``random_spans_helper``): 568 raw tokens for 512 inputs and 114 targets.
The loss is the cross-entropy of every target token under the model's output layer, summed; ``span_corruption``
is logged per target token with its perplexity and accuracy.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from plm_toolkit.core.errors import ConfigError
from plm_toolkit.core.registry import OBJECTIVES
from plm_toolkit.data.layouts.plan import Layout
from plm_toolkit.data.layouts.registry import choose_layout
from plm_toolkit.data.tokenization.sentinels import check_sentinels
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.models.base import ENCODER_DECODER
from plm_toolkit.nn.losses import linear_cross_entropy
from plm_toolkit.objectives.base import BatchTransform, DataPlan, Objective, ObjectiveOutput
from plm_toolkit.objectives.span_noise import IGNORE_INDEX, SpanCorruption, random_spans_helper


@dataclass
class SpanCorruptionConfig:
    # Registry name of the objective.
    name: str = "span_corruption"
    # Share of each window's tokens that are dropped from the input and predicted (T5: 0.15).
    noise_density: float = 0.15
    # Mean length of a dropped span, in tokens (T5: 3).
    mean_noise_span_length: float = 3.0


@OBJECTIVES.register("span_corruption", SpanCorruptionConfig)
class SpanCorruptionObjective(Objective):
    required_capabilities = frozenset({ENCODER_DECODER})
    perplexity_components = frozenset({"span_corruption"})
    metric_denominators = {"span_corruption_correct": "span_corruption"}
    natural_layout = Layout.streams

    def __init__(self, config: SpanCorruptionConfig, model: nn.Module, vocab: Vocab):
        super().__init__()
        self.config, self.vocab = config, vocab
        self.decoder_start_id = model.decoder_start_token_id

    @classmethod
    def check_config(cls, config) -> None:
        if not 0.0 < config.noise_density < 1.0:
            raise ConfigError(f"objective.noise_density={config.noise_density}: expected a share in (0, 1)")
        if config.mean_noise_span_length < 1.0:
            raise ConfigError(
                f"objective.mean_noise_span_length={config.mean_noise_span_length}: a span holds at least one token"
            )

    @classmethod
    def data_plan(cls, config, data_cfg, model_config) -> DataPlan:
        """Shuffled windows of one token stream (documents joined by </s>), each as long as makes the corrupted
        input fill data.max_seq_len exactly (T5's ``random_spans_helper``)."""
        layout = choose_layout(data_cfg, cls.natural_layout, config.name)
        tokens, _ = random_spans_helper(int(data_cfg.max_seq_len), config.noise_density, config.mean_noise_span_length)
        return DataPlan(layout, window=tokens, stride=tokens, order="shuffled")

    def batch_transform(self) -> BatchTransform:
        """The corruption, once the vocabulary is known to hold T5's sentinels at its top (DataError naming what
        is missing otherwise; a window with more spans than sentinels is refused when it is corrupted)."""
        pad_id = self.vocab.require("pad_id", "span corruption")
        eos_id = self.vocab.require("eos_id", "span corruption")
        sentinels = self.vocab.sentinel_ids
        check_sentinels(sentinels, self.vocab.size)
        return SpanCorruption(
            sentinels,
            eos_id,
            pad_id,
            decoder_start_id=self.decoder_start_id,
            noise_density=self.config.noise_density,
            mean_noise_span_length=self.config.mean_noise_span_length,
        )

    def next_token_logits(self, model: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
        """(B, H) decoder states -> (B, V) scores: the model's own output layer (``plm-generate``)."""
        return model.logits(hidden)

    def target_counts(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        return {"span_corruption": int((batch["labels"] != IGNORE_INDEX).sum())}

    def forward(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        reps = model(batch["input_ids"], batch["attention_mask"], batch["decoder_input_ids"])
        weight, hidden = model.output_layer(reps.hidden.flatten(0, 1))  # (V, H), (B*L, H)
        loss_sum, correct = linear_cross_entropy(
            hidden, weight, None, batch["labels"].flatten(), ignore_index=IGNORE_INDEX
        )  # padding (IGNORE_INDEX) is no target
        return ObjectiveOutput(loss_sums={"span_corruption": loss_sum}, metrics={"span_corruption_correct": correct})
