"""Masked LM plus a weighted sentence-level objective, one backbone pass for both: BERT's MLM + NSP
(``mlm_nsp.py``, Devlin et al. 2019, section 3.1) and ALBERT's MLM + SOP (``mlm_sop.py``, Lan et al. 2020,
section 4.1) are this class with their own config and sentence objective.

The submodules are named ``mlm`` and after the sentence objective (``nsp``, ``sop``), so that the state-dict keys
(``mlm.head.*``, ``nsp.head.*``) line up with the Hugging Face adapters' name maps.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from plm_toolkit.core.errors import ConfigError
from plm_toolkit.data.layouts.plan import DataPlan
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.objectives.base import BatchTransform, Objective, ObjectiveOutput
from plm_toolkit.objectives.mlm import MaskedLanguageModeling, encode
from plm_toolkit.objectives.whole_word import with_word_units


class SwapThenMask:
    """Both transforms in order: the segments move first, so masking sees the final positions."""

    def __init__(self, swap, mask):
        self.swap, self.mask = swap, mask

    def __call__(self, batch, seeds):
        return self.mask(self.swap(batch, seeds), seeds)


class MlmWithSentenceObjective(Objective):
    """MLM + a sentence objective with one shared backbone forward; metric sums ``mlm_correct`` and
    ``<name>_correct``. The sentence loss sum is multiplied by ``objective.<name>_weight`` (the papers add the two
    mean losses unweighted: 1.0). A subclass names the sentence objective (``sentence_name``, ``sentence_class``);
    its capabilities, layout and metrics follow from the two objectives."""

    perplexity_components = frozenset({"mlm"})
    sentence_name: ClassVar[str]
    sentence_class: ClassVar[type[Objective]]

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        mlm, sentence = MaskedLanguageModeling, cls.sentence_class
        cls.required_capabilities = mlm.required_capabilities | sentence.required_capabilities
        cls.natural_layout = sentence.natural_layout
        cls.metric_denominators = {**mlm.metric_denominators, **sentence.metric_denominators}
        cls.head_groups = frozenset({mlm.head_group, sentence.head_group})

    def __init__(self, config, model: nn.Module, vocab: Vocab):
        super().__init__()
        self.check_config(config)
        self.mlm = MaskedLanguageModeling(config, model, vocab)
        self.add_module(self.sentence_name, self.sentence_class(config, model, vocab))
        self.sentence_weight = getattr(config, f"{self.sentence_name}_weight")

    @classmethod
    def check_config(cls, config) -> None:
        MaskedLanguageModeling.check_config(config)
        cls.sentence_class.check_config(config)
        weight = getattr(config, f"{cls.sentence_name}_weight")
        if weight < 0:
            raise ConfigError(f"objective.{cls.sentence_name}_weight must be at least 0, got {weight}")

    @classmethod
    def data_plan(cls, config, data_cfg, model_config) -> DataPlan:
        """The sentence objective's layout, with the segmenter's words beside the ids when ``word_segmenter`` is set."""
        return with_word_units(super().data_plan(config, data_cfg, model_config), config)

    @property
    def sentence(self) -> Objective:
        return getattr(self, self.sentence_name)

    def batch_transform(self) -> BatchTransform:
        first = self.sentence.batch_transform()
        return self.mlm.batch_transform() if first is None else SwapThenMask(first, self.mlm.batch_transform())

    def target_counts(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        return {**self.mlm.target_counts(batch), **self.sentence.target_counts(batch)}

    def forward(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        reps = encode(model, batch)
        mlm = self.mlm.loss_from(reps, batch, model)
        sentence = self.sentence.loss_from(reps, batch, model)
        # Each sum is divided by its own target count in the loop: mean MLM + mean NSP (SOP), as in the papers.
        weighted = self.sentence_weight * sentence.loss_sums[self.sentence_name]
        loss_sums = {**mlm.loss_sums, self.sentence_name: weighted}
        return ObjectiveOutput(loss_sums=loss_sums, metrics={**mlm.metrics, **sentence.metrics})
