"""ELECTRA's discriminator (Clark et al. 2020, https://arxiv.org/abs/2003.10555): the BERT encoder without a pooler,
with an embedding narrower than the model where the paper says so (ELECTRA-Small: E = 128, H = 256).

This is the backbone that fine-tuning loads. The generator, a smaller encoder that shares these embeddings, and
both heads belong to the replaced-token-detection objective (``objectives/rtd.py``) and are saved with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from plm_toolkit.core.registry import MODELS
from plm_toolkit.models.base import BIDIRECTIONAL, SEGMENTS
from plm_toolkit.models.bert import Bert, BertConfig
from plm_toolkit.nn.feed_forward import HiddenAct


@dataclass
class ElectraConfig(BertConfig):
    # Registry name of the family.
    name: str = "electra"
    # The generator's masked-LM head uses the exact gelu whatever hidden_act is (transformers' ElectraForMaskedLM).
    head_act: HiddenAct | None = HiddenAct.gelu


@MODELS.register("electra", ElectraConfig)
class Electra(Bert):
    """No pooler: ELECTRA's classification heads read the first position's hidden state themselves."""

    capabilities = frozenset({BIDIRECTIONAL, SEGMENTS})
    summary_token = "[CLS]"
    has_pooler = False
