"""BERT's pretraining objective: masked LM plus next-sentence prediction (Devlin et al. 2019, section 3.1).

Both heads read one backbone pass over sentence pairs. The submodules are named ``mlm`` and ``nsp`` so that the
state-dict keys (``mlm.head.*``, ``nsp.head.*``) line up with the Hugging Face adapter's name map.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from plm_toolkit.data.vocab import Vocab
from plm_toolkit.errors import ConfigError
from plm_toolkit.objectives.base import BatchTransform, Objective, ObjectiveOutput
from plm_toolkit.objectives.mlm import MaskedLanguageModeling, MlmConfig, encode
from plm_toolkit.objectives.nsp import NextSentencePrediction
from plm_toolkit.registry import OBJECTIVES


@dataclass
class MlmNspConfig(MlmConfig):
    # Registry name of the objective.
    name: str = "mlm_nsp"
    # Multiplies the NSP loss sum; the paper adds the two mean losses unweighted (1.0).
    nsp_weight: float = 1.0


@OBJECTIVES.register("mlm_nsp", MlmNspConfig)
class MlmNsp(Objective):
    """MLM + NSP with one shared backbone forward; metric sums ``mlm_correct`` and ``nsp_correct``."""

    perplexity_components = frozenset({"mlm"})

    required_capabilities = MaskedLanguageModeling.required_capabilities | NextSentencePrediction.required_capabilities
    natural_layout = "sentence_pairs"
    metric_denominators = {**MaskedLanguageModeling.metric_denominators, **NextSentencePrediction.metric_denominators}

    def __init__(self, config: MlmNspConfig, model: nn.Module, vocab: Vocab):
        super().__init__()
        self.check_config(config)
        self.mlm = MaskedLanguageModeling(config, model, vocab)
        self.nsp = NextSentencePrediction(config, model, vocab)
        self.nsp_weight = config.nsp_weight

    @classmethod
    def check_config(cls, config) -> None:
        MaskedLanguageModeling.check_config(config)
        if config.nsp_weight < 0:
            raise ConfigError(f"objective.nsp_weight must be at least 0, got {config.nsp_weight}")

    def batch_transform(self) -> BatchTransform:
        return self.mlm.batch_transform()

    def target_counts(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        return {**self.mlm.target_counts(batch), **self.nsp.target_counts(batch)}

    def forward(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        reps = encode(model, batch)
        mlm = self.mlm.loss_from(reps, batch, model)
        nsp = self.nsp.loss_from(reps, batch, model)
        # Each sum is divided by its own target count in the loop, so this is the paper's mean MLM + mean NSP.
        loss_sums = {**mlm.loss_sums, "nsp": self.nsp_weight * nsp.loss_sums["nsp"]}
        return ObjectiveOutput(loss_sums=loss_sums, metrics={**mlm.metrics, **nsp.metrics})
