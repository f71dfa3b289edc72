"""The position-wise feed-forward block (Vaswani et al. 2017, section 3.3), the one MLP every family uses."""

from __future__ import annotations

import torch
from torch import nn

from plm_toolkit.core.choices import choices
from plm_toolkit.nn.heads import activation

# Activation names a model config may choose: gelu is the exact erf form (BERT), gelu_tanh the tanh approximation
# (GPT, GPT-2), relu the original Transformer's.
HiddenAct = choices("HiddenAct", "gelu", "gelu_tanh", "relu")


class FeedForward(nn.Module):
    """Linear -> activation (-> dropout) -> Linear, applied to every position alone. ``inner_dropout`` is the
    dropout on the activations that Transformer-XL, XLNet and T5 apply; BERT and GPT have none there.

    ``gated``: the activation's output is multiplied by a second, linear projection of the input
    (``intermediate_linear``), the GLU variants of Shazeer 2020; GEGLU with gelu_tanh is T5 v1.1's feed-forward.
    """

    def __init__(
        self,
        hidden_size: int,
        intermediate_size: int,
        hidden_act: str,
        bias: bool = True,
        inner_dropout: float = 0.0,
        gated: bool = False,
    ):
        super().__init__()
        self.intermediate = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.intermediate_linear = nn.Linear(hidden_size, intermediate_size, bias=bias) if gated else None
        self.act = activation(hidden_act)
        self.inner_dropout = nn.Dropout(inner_dropout) if inner_dropout else None
        self.output = nn.Linear(intermediate_size, hidden_size, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inner = self.act(self.intermediate(x))
        if self.intermediate_linear is not None:
            inner = inner * self.intermediate_linear(x)
        if self.inner_dropout is not None:
            inner = self.inner_dropout(inner)
        return self.output(inner)


class PositionwiseFeedForward(FeedForward):
    """Transformer-XL's and XLNet's feed-forward sub-block with its residual and post-LN inside, as in both
    reference codes: ``layer_norm(x + dropout(W2 dropout(act(W1 x))))``."""

    def __init__(
        self, hidden_size: int, intermediate_size: int, hidden_act: str, dropout: float, layer_norm_eps: float
    ):
        super().__init__(hidden_size, intermediate_size, hidden_act, inner_dropout=dropout)
        self.layer_norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer_norm(x + self.dropout(super().forward(x)))
