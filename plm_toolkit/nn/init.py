"""Weight initialisation shared by the families that follow BERT's (normal weights, zero biases, unit norms)."""

from __future__ import annotations

import torch
from torch import nn


def init_weights(module: nn.Module, std: float) -> None:
    """BERT's init, for ``nn.Module.apply``: normal(0, std) weights (the TensorFlow release truncates at 2 std,
    Hugging Face does not), zero biases, LayerNorm 1 / 0; the padding row starts at zero."""
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, mean=0.0, std=std)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=std)
        if module.padding_idx is not None:
            with torch.no_grad():
                module.weight[module.padding_idx].zero_()
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)
