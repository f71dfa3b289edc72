"""Task heads: small modules over a backbone's representations, shared by every family (no per-model heads)."""

from __future__ import annotations

import torch
from torch import nn

from plm_toolkit.tasks.base import head_dropout, hidden_size, init_linear

# Activations of a head's own dense layer over the summary (transformers' tanh, and its exact gelu).
ACTIVATIONS = {"tanh": nn.Tanh, "gelu": nn.GELU}


class LinearHead(nn.Module):
    """dropout -> linear: BERT's classifier over the pooled summary (section 4.1) or over every token (NER).

    ``add_dense`` puts a dense layer and activation before it, as the sequence heads of fine-tuned ELECTRA (gelu over
    the first token) and XLNet (tanh over the last) have: in evaluation mode the same function as theirs (their extra
    dropout before the dense layer acts in training only). ``drop_bias`` leaves the classifier without a bias, as
    transformers' GPT-2 and GPT sequence classifiers (``score``) are."""

    def __init__(self, model: nn.Module, num_outputs: int, dropout: float | None = None, width: int | None = None):
        super().__init__()
        self.dense: nn.Linear | None = None
        self.activation: nn.Module = nn.Identity()
        # The activation's name (ACTIVATIONS) once there is a dense layer: the checkpoint's config.yaml records it
        # (tasks/checkpoint_head.py's head_record), since the weights do not show it.
        self.activation_name: str | None = None
        self.dropout = nn.Dropout(head_dropout(model, dropout))
        self.linear = init_linear(nn.Linear(width or hidden_size(model), num_outputs), model)

    def add_dense(self, activation: str) -> None:
        width = self.linear.in_features
        self.dense = nn.Linear(width, width)
        self.activation = ACTIVATIONS[activation]()
        self.activation_name = activation

    def drop_bias(self) -> None:
        self.linear.bias = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.dense is not None:
            x = self.activation(self.dense(x))
        return self.linear(self.dropout(x))  # (..., num_outputs)


class SpanHead(nn.Module):
    """Start and end scores per token: BERT's S and E vectors (section 4.2) as one (hidden -> 2) projection."""

    def __init__(self, model: nn.Module, width: int | None = None):
        super().__init__()
        self.linear = init_linear(nn.Linear(width or hidden_size(model), 2), model)

    def forward(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        start, end = self.linear(hidden).unbind(dim=-1)  # (B, T, 2) -> 2 x (B, T)
        return start, end
