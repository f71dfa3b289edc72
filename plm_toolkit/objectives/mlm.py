"""Masked language modeling (Devlin et al. 2019, section 3.1, "Task #1: Masked LM").

The batch transform (``masking.MaskingTransform``) hides a fixed share of each row's tokens; the loss is the
cross-entropy of the original ids at those positions, under a head whose decoder is the backbone's word embedding.
Only the target positions (about 15%) go through the head: its (hidden x vocab) projection is the costliest matmul
of a small model, so gathering first saves most of it without changing the loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from plm_toolkit.core.errors import ConfigError
from plm_toolkit.core.registry import OBJECTIVES
from plm_toolkit.data.batching.packing import block_diagonal_mask
from plm_toolkit.data.layouts.plan import DataPlan
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.models.base import BIDIRECTIONAL, Representations
from plm_toolkit.nn.heads import masked_lm_head
from plm_toolkit.nn.losses import linear_cross_entropy
from plm_toolkit.objectives.base import BatchTransform, Objective, ObjectiveOutput
from plm_toolkit.objectives.masking import (
    IGNORE_INDEX,
    MaskingUnit,
    WordSegmenter,
    check_masking_config,
    masking_from_config,
)
from plm_toolkit.objectives.whole_word import check_word_segmenter, with_word_units


@dataclass
class MlmConfig:
    # Registry name of the objective.
    name: str = "mlm"
    # Share of each row's maskable tokens (not special, not padding) that become targets; BERT: 0.15.
    mask_prob: float = 0.15
    # Share of the targets replaced by [MASK]; BERT: 0.8.
    mask_token_prob: float = 0.8
    # Share of the targets replaced by a uniformly random non-special token; BERT: 0.1 (the rest stay unchanged).
    random_token_prob: float = 0.1
    # Cap on the targets per row (BERT's max_predictions_per_seq, 20 at length 128); null means no cap.
    max_predictions_per_seq: int | None = None
    # Unit of selection: token (BERT), whole_word (every piece of a chosen word), ngram (spans of up to max_ngram
    # whole words, p(n) ~ 1/n: ALBERT), knowledge (ERNIE's words, phrases and entities: objective=knowledge_masking).
    masking: MaskingUnit = MaskingUnit.token
    # Longest n-gram, in words, of masking=ngram (ALBERT: 3).
    max_ngram: int = 3
    # Words of masking=whole_word (or ngram) found by a segmenter at preparation time and kept beside the ids:
    # jieba (Chinese words: HFL's Chinese BERT-wwm; needs the zh extra) or regex (BERT's split). Null: the
    # tokenizer's pieces decide (## pieces continue a word; each Chinese character is a word of its own).
    word_segmenter: WordSegmenter | None = None
    # 0: dynamic masking, a new mask every time a sequence is seen (RoBERTa section 4.1). N > 0: BERT's static
    # masking, N masks per sequence fixed ahead of training and used in turn, epoch e taking mask e mod N
    # (the original BERT: dupe_factor 10).
    dupe_factor: int = 0


def encode(model: nn.Module, batch: dict[str, torch.Tensor]) -> Representations:
    """Run the backbone on a batch's model inputs (token types only when the batch has them)."""
    # A packed batch (hardware.unpad) brings its sequence ids (the block-diagonal mask, built on the device) and
    # per-sequence positions.
    packed = "sequence_ids" in batch
    inputs = {
        "input_ids": batch["input_ids"],
        "attention_mask": block_diagonal_mask(batch["sequence_ids"]) if packed else batch["attention_mask"],
    }
    if "position_ids" in batch:
        inputs["position_ids"] = batch["position_ids"]
    if "token_type_ids" in batch:
        inputs["token_type_ids"] = batch["token_type_ids"]
    return model(**inputs)


@OBJECTIVES.register("mlm", MlmConfig)
class MaskedLanguageModeling(Objective):
    """MLM over ``mlm_labels``; its metric sum ``mlm_correct`` is logged as ``mlm_accuracy`` (correct / targets)."""

    head_group = "mlm"
    perplexity_components = frozenset({"mlm"})

    required_capabilities = frozenset({BIDIRECTIONAL})
    # ``metrics["mlm_correct"]`` counts correct predictions; the loop logs it / count["mlm"] as mlm_accuracy.
    metric_denominators = {"mlm_correct": "mlm"}
    # Whether the objective tokenizes its corpus with knowledge units (objective.masking=knowledge needs them).
    finds_units: ClassVar[bool] = False
    reads_packed_rows = True
    # Nowhere yet: through plm-train itself (bert_base, 256 x 128, bf16, H200) the compiled unpadded run made 178,112
    # tokens/s against eager's 197,456, though the synthetic-batch harness measured its step at 1.39x (H100); on a
    # CPU compiling does not pay back either (docs/speed-and-benchmarks.md).
    compiles_by_default = frozenset()

    def __init__(self, config: MlmConfig, model: nn.Module, vocab: Vocab):
        super().__init__()
        self.head = masked_lm_head(model.config)
        self.masking = masking_from_config(config, vocab)

    @classmethod
    def check_config(cls, config) -> None:
        check_masking_config(config, finds_units=cls.finds_units)
        if not cls.finds_units:  # knowledge_masking checks its own word_segmenter
            check_word_segmenter(config)
        if config.dupe_factor < 0:
            raise ConfigError(
                f"objective.dupe_factor must be 0 (dynamic masking) or positive, got {config.dupe_factor}"
            )

    @classmethod
    def data_plan(cls, config, data_cfg, model_config) -> DataPlan:
        """The default plan, with the segmenter's words beside the ids when ``word_segmenter`` is set."""
        return with_word_units(super().data_plan(config, data_cfg, model_config), config)

    def batch_transform(self) -> BatchTransform:
        return self.masking

    def target_counts(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        return {"mlm": int((batch["mlm_labels"] != IGNORE_INDEX).sum())}

    def forward(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        return self.loss_from(encode(model, batch), batch, model)

    def loss_from(self, reps: Representations, batch: dict[str, torch.Tensor], model: nn.Module) -> ObjectiveOutput:
        """The loss over representations already computed (``MlmNsp`` shares one backbone pass with NSP)."""
        labels = batch["mlm_labels"]
        positions = batch.get("mlm_positions")  # (N,) flat target positions, padded with B * T (masking transform)
        if positions is None:
            targets = labels != IGNORE_INDEX  # (B, T)
            hidden = reps.hidden[targets]  # (N, H): only the N target positions reach the vocabulary projection
            gold = labels[targets]  # (N,)
        else:
            flat = reps.hidden.flatten(0, 1)  # (B*T, H)
            hidden = flat.index_select(0, positions.clamp(max=flat.shape[0] - 1))  # (N, H)
            gold = F.pad(labels.flatten(), (0, 1), value=IGNORE_INDEX).gather(0, positions)  # (N,), pads ignored
        # The (N, V) logits are never held at once, nor their softmax (nn/losses.py).
        loss_sum, correct = linear_cross_entropy(
            self.head.transform(hidden), model.input_embeddings.weight, self.head.bias, gold, ignore_index=IGNORE_INDEX
        )
        return ObjectiveOutput(loss_sums={"mlm": loss_sum}, metrics={"mlm_correct": correct})
