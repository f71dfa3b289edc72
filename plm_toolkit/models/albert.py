"""ALBERT (Lan et al. 2020, https://arxiv.org/abs/1909.11942): BERT with a factorized embedding and cross-layer
parameter sharing.

Factorized embedding (section 3.1): tokens embed into E dimensions and a linear map takes them to the model width
H, so the vocabulary costs V x E + E x H instead of V x H. That part is ``BertConfig.embedding_size``; what is
ALBERT's own is the sharing (section 3.1, "cross-layer parameter sharing", table 4):

- ``all``: one encoder layer applied ``num_layers`` times (the paper's default, and the released checkpoints);
- ``attention``: the self-attention block (with its LayerNorm) is shared, each layer keeps its own feed-forward;
- ``ffn``: the feed-forward block (with its LayerNorm) is shared, each layer keeps its own attention;
- ``none``: no sharing, BERT with a factorized embedding.

Shared modules are the same Python objects under several names, so the optimizer, DDP and the checkpoint (which
drops second names of one storage) each see them once. The paper's objective is MLM over n-grams + sentence-order
prediction (``objective=mlm_sop``, ``objective.masking=ngram``).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from plm_toolkit.core.choices import choices
from plm_toolkit.core.registry import MODELS
from plm_toolkit.models.bert import Bert, BertConfig, BertEncoder
from plm_toolkit.nn.feed_forward import HiddenAct

Sharing = choices("Sharing", "all", "attention", "ffn", "none")

# Submodules of a PostLNEncoderLayer that each sharing mode ties across layers.
_SHARED_PARTS = {
    "attention": ("attention", "attention_layer_norm"),
    "ffn": ("feed_forward", "output_layer_norm"),
}


@dataclass
class AlbertConfig(BertConfig):
    # Registry name of the family.
    name: str = "albert"
    # Width E of the factorized embedding (128 in every paper configuration).
    embedding_size: int | None = 128
    # Cross-layer sharing: all (the paper's), attention (attention blocks only), ffn (feed-forward blocks only),
    # none.
    sharing: Sharing = Sharing.all
    # The released ALBERT uses the tanh approximation of GELU (gelu_new).
    hidden_act: HiddenAct = HiddenAct.gelu_tanh
    # ALBERT drops dropout entirely for pretraining (section 4.1, "we remove dropout").
    hidden_dropout: float = 0.0
    # Dropout on the attention probabilities (0 in the paper's pretraining).
    attention_dropout: float = 0.0


def shared_encoder(config: AlbertConfig) -> BertEncoder:
    """A BertEncoder whose layers share the parts ``config.sharing`` names."""
    sharing = getattr(config.sharing, "value", config.sharing)
    if sharing == "all":
        return BertEncoder(config, num_distinct=1)
    encoder = BertEncoder(config)
    first = encoder.layers[0]
    for layer in encoder.layers[1:]:
        for part in _SHARED_PARTS.get(sharing, ()):
            setattr(layer, part, getattr(first, part))
    return encoder


@MODELS.register("albert", AlbertConfig)
class Albert(Bert):
    """Bert's forward over a shared encoder; ``embeddings_project`` is HF's ``embedding_hidden_mapping_in``."""

    summary_token = "[CLS]"

    def build_encoder(self, config: AlbertConfig) -> nn.Module:
        return shared_encoder(config)
