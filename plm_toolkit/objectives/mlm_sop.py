"""ALBERT's pretraining objective: masked LM (n-gram masking) plus sentence-order prediction (Lan et al. 2020,
section 4.1), one backbone pass over in-order segment pairs that the transform swaps, then masks.

The submodules are named ``mlm`` and ``sop`` so that the state-dict keys (``mlm.head.*``, ``sop.head.*``) line up
with the Hugging Face adapter's name map.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from plm_toolkit.data.vocab import Vocab
from plm_toolkit.errors import ConfigError
from plm_toolkit.objectives.base import BatchTransform, Objective, ObjectiveOutput
from plm_toolkit.objectives.masking import MaskingUnit
from plm_toolkit.objectives.mlm import MaskedLanguageModeling, MlmConfig, encode
from plm_toolkit.objectives.sop import SentenceOrderPrediction, check_swap_prob
from plm_toolkit.registry import OBJECTIVES


@dataclass
class MlmSopConfig(MlmConfig):
    # Registry name of the objective.
    name: str = "mlm_sop"
    # ALBERT masks n-grams of up to 3 whole words (section 4.1).
    masking: MaskingUnit = MaskingUnit.ngram
    # Probability that a row's two segments are swapped (the SOP negative); ALBERT: 0.5.
    swap_prob: float = 0.5
    # Multiplies the SOP loss sum; the paper adds the two mean losses unweighted (1.0).
    sop_weight: float = 1.0


class SwapThenMask:
    """Both transforms in order: the segments move first, so masking sees the final positions."""

    def __init__(self, swap, mask):
        self.swap, self.mask = swap, mask

    def __call__(self, batch, seeds):
        return self.mask(self.swap(batch, seeds), seeds)


@OBJECTIVES.register("mlm_sop", MlmSopConfig)
class MlmSop(Objective):
    """MLM + SOP with one shared backbone forward; metric sums ``mlm_correct`` and ``sop_correct``."""

    perplexity_components = frozenset({"mlm"})

    required_capabilities = MaskedLanguageModeling.required_capabilities | SentenceOrderPrediction.required_capabilities
    natural_layout = "segment_pairs"
    metric_denominators = {**MaskedLanguageModeling.metric_denominators, **SentenceOrderPrediction.metric_denominators}

    def __init__(self, config: MlmSopConfig, model: nn.Module, vocab: Vocab):
        super().__init__()
        self.check_config(config)
        self.mlm = MaskedLanguageModeling(config, model, vocab)
        self.sop = SentenceOrderPrediction(config, model, vocab)
        self.sop_weight = config.sop_weight

    @classmethod
    def check_config(cls, config) -> None:
        MaskedLanguageModeling.check_config(config)
        check_swap_prob(config)
        if config.sop_weight < 0:
            raise ConfigError(f"objective.sop_weight must be at least 0, got {config.sop_weight}")

    def batch_transform(self) -> BatchTransform:
        return SwapThenMask(self.sop.batch_transform(), self.mlm.batch_transform())

    def target_counts(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        return {**self.mlm.target_counts(batch), **self.sop.target_counts(batch)}

    def forward(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        reps = encode(model, batch)
        mlm = self.mlm.loss_from(reps, batch, model)
        sop = self.sop.loss_from(reps, batch, model)
        # Each sum is divided by its own target count in the loop: mean MLM + mean SOP, as in the paper.
        loss_sums = {**mlm.loss_sums, "sop": self.sop_weight * sop.loss_sums["sop"]}
        return ObjectiveOutput(loss_sums=loss_sums, metrics={**mlm.metrics, **sop.metrics})
