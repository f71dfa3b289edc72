"""ALBERT's pretraining objective: masked LM (n-gram masking) plus sentence-order prediction (Lan et al. 2020,
section 4.1), one backbone pass over in-order segment pairs that the transform swaps, then masks
(``mlm_sentence.py``).

The submodules are named ``mlm`` and ``sop`` so that the state-dict keys (``mlm.head.*``, ``sop.head.*``) line up
with the Hugging Face adapter's name map.
"""

from __future__ import annotations

from dataclasses import dataclass

from plm_toolkit.core.registry import OBJECTIVES
from plm_toolkit.objectives.masking import MaskingUnit
from plm_toolkit.objectives.mlm import MlmConfig
from plm_toolkit.objectives.mlm_sentence import MlmWithSentenceObjective
from plm_toolkit.objectives.sop import SentenceOrderPrediction


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


@OBJECTIVES.register("mlm_sop", MlmSopConfig)
class MlmSop(MlmWithSentenceObjective):
    """MLM + SOP with one shared backbone forward; metric sums ``mlm_correct`` and ``sop_correct``."""

    sentence_name = "sop"
    sentence_class = SentenceOrderPrediction
