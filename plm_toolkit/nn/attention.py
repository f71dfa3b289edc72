"""Multi-head self-attention over PyTorch's fused ``scaled_dot_product_attention``.

Shared by every family with plain (absolute-position) attention: BERT, RoBERTa, ALBERT, ELECTRA, GPT. Families
with relative positions (Transformer-XL, XLNet, T5) add their score terms in their own modules.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def padding_mask(attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """A (B, T) 1 = token / 0 = padding mask -> a boolean (B, 1, 1, T) mask that SDPA broadcasts over heads and
    queries (True = may attend). None stays None: every position attends to every position."""
    if attention_mask is None:
        return None
    if attention_mask.dim() == 4:  # already (B, 1, T, T): a packed batch's block-diagonal mask
        return attention_mask
    return attention_mask.bool()[:, None, None, :]  # (B, 1, 1, T)


class MultiHeadSelfAttention(nn.Module):
    """Scaled dot-product attention with ``num_heads`` heads (Vaswani et al. 2017, section 3.2.2).

    ``mask`` is either boolean (True = may attend) or additive (added to the scores, ``-inf`` or a large negative
    number where attention is forbidden), broadcastable to (B, nh, T, T). The output projection is applied here;
    the residual dropout and the LayerNorm belong to the layer, where pre-LN and post-LN differ.
    """

    def __init__(self, hidden_size: int, num_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if hidden_size % num_heads != 0:
            raise ValueError(f"hidden_size {hidden_size} is not a multiple of num_heads {num_heads}")
        self.num_heads = num_heads
        self.head_size = hidden_size // num_heads
        self.dropout = dropout
        self.query = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.key = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.value = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.output = nn.Linear(hidden_size, hidden_size, bias=bias)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.num_heads, self.head_size).transpose(1, 2)  # (B, nh, T, hs)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, is_causal: bool = False) -> torch.Tensor:
        """(B, T, H) -> (B, T, H)."""
        batch, length, hidden = x.shape
        q = self._split_heads(self.query(x))  # (B, nh, T, hs)
        k = self._split_heads(self.key(x))  # (B, nh, T, hs)
        v = self._split_heads(self.value(x))  # (B, nh, T, hs)
        context = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=is_causal and mask is None,
        )  # (B, nh, T, hs)
        context = context.transpose(1, 2).reshape(batch, length, hidden)  # (B, T, H)
        return self.output(context)
