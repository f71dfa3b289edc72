"""The position-wise feed-forward block and the post-LN Transformer encoder layer built from it."""

from __future__ import annotations

import torch
from torch import nn

from plm_toolkit.config.schema import choices
from plm_toolkit.nn.attention import MultiHeadSelfAttention
from plm_toolkit.nn.heads import activation

# Activation names a model config may choose: gelu is the exact erf form (BERT), gelu_tanh the tanh approximation
# (GPT-2), relu the original Transformer's.
HiddenAct = choices("HiddenAct", "gelu", "gelu_tanh", "relu")


class FeedForward(nn.Module):
    """Linear -> activation -> Linear, applied to every position alone (Vaswani et al. 2017, section 3.3)."""

    def __init__(self, hidden_size: int, intermediate_size: int, hidden_act: str, bias: bool = True):
        super().__init__()
        self.intermediate = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.act = activation(hidden_act)
        self.output = nn.Linear(intermediate_size, hidden_size, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output(self.act(self.intermediate(x)))


class PostLNEncoderLayer(nn.Module):
    """One encoder layer as in BERT: each sub-block is ``LayerNorm(x + dropout(sublayer(x)))``.

    Post-LN (LayerNorm after the residual sum) is the original Transformer's and BERT's arrangement; GPT-2 style
    pre-LN layers live with the families that use them.
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        intermediate_size: int,
        hidden_act: str = "gelu",
        hidden_dropout: float = 0.1,
        attention_dropout: float = 0.1,
        layer_norm_eps: float = 1e-12,
    ):
        super().__init__()
        self.attention = MultiHeadSelfAttention(hidden_size, num_heads, dropout=attention_dropout)
        self.attention_layer_norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.feed_forward = FeedForward(hidden_size, intermediate_size, hidden_act)
        self.output_layer_norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.dropout = nn.Dropout(hidden_dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T, H) -> (B, T, H); ``mask`` as in ``MultiHeadSelfAttention``."""
        x = self.attention_layer_norm(x + self.dropout(self.attention(x, mask)))
        return self.output_layer_norm(x + self.dropout(self.feed_forward(x)))
