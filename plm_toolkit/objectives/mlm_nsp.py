"""BERT's pretraining objective: masked LM plus next-sentence prediction (Devlin et al. 2019, section 3.1), both
heads over one backbone pass over sentence pairs (``mlm_sentence.py``). The submodules are named ``mlm`` and
``nsp`` so that the state-dict keys (``mlm.head.*``, ``nsp.head.*``) line up with the Hugging Face adapter's name
map.
"""

from __future__ import annotations

from dataclasses import dataclass

from plm_toolkit.core.registry import OBJECTIVES
from plm_toolkit.objectives.mlm import MlmConfig
from plm_toolkit.objectives.mlm_sentence import MlmWithSentenceObjective
from plm_toolkit.objectives.nsp import NextSentencePrediction


@dataclass
class MlmNspConfig(MlmConfig):
    # Registry name of the objective.
    name: str = "mlm_nsp"
    # Multiplies the NSP loss sum; the paper adds the two mean losses unweighted (1.0).
    nsp_weight: float = 1.0


@OBJECTIVES.register("mlm_nsp", MlmNspConfig)
class MlmNsp(MlmWithSentenceObjective):
    """MLM + NSP with one shared backbone forward; metric sums ``mlm_correct`` and ``nsp_correct``."""

    sentence_name = "nsp"
    sentence_class = NextSentencePrediction
