"""A learned scalar mix of a backbone's layers (Peters et al. 2018, equation 1):
ELMo_task = gamma * sum_j s_j h_j with s = softmax(w). The weights start equal and gamma at 1."""

from __future__ import annotations

import torch
from torch import nn


class ScalarMix(nn.Module):
    def __init__(self, num_layers: int):
        super().__init__()
        self.weights = nn.Parameter(torch.zeros(num_layers))
        self.gamma = nn.Parameter(torch.ones(()))

    def normalized_weights(self) -> torch.Tensor:
        return torch.softmax(self.weights, dim=0)  # (L,), sums to one

    def forward(self, layers: list[torch.Tensor]) -> torch.Tensor:
        """L tensors of one shape (..., H) -> (..., H)."""
        if len(layers) != self.weights.shape[0]:
            raise ValueError(f"expected {self.weights.shape[0]} layers, got {len(layers)}")
        stacked = torch.stack(layers, dim=0)  # (L, ..., H)
        weights = self.normalized_weights().to(stacked.dtype).view(-1, *([1] * (stacked.dim() - 1)))
        return self.gamma * (weights * stacked).sum(dim=0)
