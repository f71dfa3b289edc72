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
import torch.nn.functional as F
from torch import nn

from plm_toolkit.data.sentinels import check_sentinels
from plm_toolkit.data.vocab import Vocab
from plm_toolkit.errors import ConfigError
from plm_toolkit.models.base import ENCODER_DECODER
from plm_toolkit.objectives.base import BatchTransform, Objective, ObjectiveOutput
from plm_toolkit.objectives.span_noise import IGNORE_INDEX, SpanCorruption, random_spans_helper, span_counts
from plm_toolkit.registry import OBJECTIVES


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
    data_layout = "streams"

    def __init__(self, config: SpanCorruptionConfig, model: nn.Module, vocab: Vocab):
        super().__init__()
        self.config = config
        self.transform = SpanCorruption(
            vocab.sentinel_ids,
            vocab.require("eos_id", "span corruption"),
            vocab.require("pad_id", "span corruption"),
            decoder_start_id=model.config.pad_token_id,
            noise_density=config.noise_density,
            mean_noise_span_length=config.mean_noise_span_length,
        )

    @classmethod
    def check_config(cls, config) -> None:
        if not 0.0 < config.noise_density < 1.0:
            raise ConfigError(f"objective.noise_density={config.noise_density}: expected a share in (0, 1)")
        if config.mean_noise_span_length < 1.0:
            raise ConfigError(
                f"objective.mean_noise_span_length={config.mean_noise_span_length}: a span holds at least one token"
            )

    @classmethod
    def stream_window(cls, config, max_seq_len: int) -> tuple[int, int]:
        """Raw windows whose corrupted form fills ``max_seq_len`` exactly, one after the other."""
        tokens, _ = cls.window_lengths(config, max_seq_len)
        return tokens, tokens

    @staticmethod
    def window_lengths(config, max_seq_len: int) -> tuple[int, int]:
        """(raw tokens per window, target tokens) for encoder inputs of ``max_seq_len``."""
        return random_spans_helper(max_seq_len, config.noise_density, config.mean_noise_span_length)

    @staticmethod
    def spans_per_window(config, max_seq_len: int) -> int:
        tokens, _ = SpanCorruptionObjective.window_lengths(config, max_seq_len)
        return span_counts(tokens, config.noise_density, config.mean_noise_span_length)[1]

    def check_vocab(self, vocab: Vocab, max_seq_len: int) -> None:
        """DataError unless the vocabulary has T5's sentinels, enough of them for a window's spans."""
        check_sentinels(vocab.sentinel_ids, vocab.size, self.spans_per_window(self.config, max_seq_len))

    def batch_transform(self) -> BatchTransform:
        return self.transform

    def target_counts(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        return {"span_corruption": int((batch["labels"] != IGNORE_INDEX).sum())}

    def forward(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        reps = model(batch["input_ids"], batch["attention_mask"], batch["decoder_input_ids"])
        labels = batch["labels"]
        targets = labels != IGNORE_INDEX  # (B, L)
        logits = model.logits(reps.hidden[targets])  # (N, V): only real targets reach the output layer
        gold = labels[targets]  # (N,)
        loss_sum = F.cross_entropy(logits.float(), gold, reduction="sum")
        correct = (logits.detach().argmax(dim=-1) == gold).sum()
        return ObjectiveOutput(loss_sums={"span_corruption": loss_sum}, metrics={"span_corruption_correct": correct})
