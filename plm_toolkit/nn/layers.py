"""The Transformer layer every family with plain attention is built from: self-attention, an optional
cross-attention over an encoder's states, and the feed-forward block, each a residual sub-block with a LayerNorm.

Post-LN puts the LayerNorm after the residual sum, ``LN(x + dropout(sublayer(x)))``: the original Transformer
(Vaswani et al. 2017), BERT and GPT-1. Pre-LN puts it before the sub-block, ``x + dropout(sublayer(LN(x)))``:
GPT-2 (Radford et al. 2019, section 2.3) and T5; such stacks end with one more LayerNorm, which belongs to the
family. Submodule names (``attention``, ``attention_layer_norm``, ``feed_forward``, ``output_layer_norm``) are the
same either way, so checkpoint adapters and ALBERT's sharing address the parts by one name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from plm_toolkit.nn.attention import KVCache, MultiHeadAttention
from plm_toolkit.nn.feed_forward import FeedForward


@dataclass
class LayerCache:
    """What one layer keeps between decoding steps: its self-attention's keys and values, and its cross-attention's
    (the encoder's, computed once)."""

    self_attention: KVCache = field(default_factory=KVCache)
    cross_attention: KVCache = field(default_factory=KVCache)

    def reorder(self, index: torch.Tensor) -> None:
        self.self_attention.reorder(index)
        self.cross_attention.reorder(index)


def layer_norm(kind: str, size: int, eps: float) -> nn.Module:
    """LayerNorm (``layer``) or RMSNorm (``rms``: no centring, no bias; T5's)."""
    return nn.RMSNorm(size, eps=eps) if kind == "rms" else nn.LayerNorm(size, eps=eps)


class TransformerLayer(nn.Module):
    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        intermediate_size: int,
        hidden_act: str = "gelu",
        hidden_dropout: float = 0.1,
        attention_dropout: float = 0.1,
        layer_norm_eps: float = 1e-12,
        pre_norm: bool = False,
        cross_attention: bool = False,
        bias: bool = True,
        head_size: int | None = None,
        norm: str = "layer",
        attention_scale: float | None = None,
        feed_forward_dropout: float = 0.0,
        gated: bool = False,
    ):
        """``attention_scale`` replaces 1 / sqrt(head_size) on the scores (T5: 1); ``feed_forward_dropout`` drops
        the feed-forward's inner activations; ``gated`` makes it a GLU (``FeedForward``)."""
        super().__init__()
        self.pre_norm = pre_norm

        def attention() -> MultiHeadAttention:
            return MultiHeadAttention(hidden_size, num_heads, attention_dropout, bias, head_size, attention_scale)

        self.attention = attention()
        self.attention_layer_norm = layer_norm(norm, hidden_size, layer_norm_eps)
        self.cross_attention = attention() if cross_attention else None
        self.cross_attention_layer_norm = layer_norm(norm, hidden_size, layer_norm_eps) if cross_attention else None
        self.feed_forward = FeedForward(
            hidden_size, intermediate_size, hidden_act, bias, inner_dropout=feed_forward_dropout, gated=gated
        )
        self.output_layer_norm = layer_norm(norm, hidden_size, layer_norm_eps)
        self.dropout = nn.Dropout(hidden_dropout)

    def _residual(self, x: torch.Tensor, norm: nn.Module, sublayer) -> torch.Tensor:
        if self.pre_norm:
            return x + self.dropout(sublayer(norm(x)))
        return norm(x + self.dropout(sublayer(x)))

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        context: torch.Tensor | None = None,
        context_mask: torch.Tensor | None = None,
        cache: LayerCache | None = None,
    ) -> torch.Tensor:
        """(B, T, H) -> (B, T, H). ``mask`` and ``is_causal`` as in ``MultiHeadAttention`` (over the cached keys
        too); ``context`` (B, S, H) with its ``context_mask`` feeds the cross-attention."""
        own = cache.self_attention if cache is not None else None
        x = self._residual(x, self.attention_layer_norm, lambda h: self.attention(h, mask, is_causal, cache=own))
        if self.cross_attention is not None and context is not None:
            other = cache.cross_attention if cache is not None else None
            cross = lambda h: self.cross_attention(h, context_mask, context=context, cache=other)
            x = self._residual(x, self.cross_attention_layer_norm, cross)
        return self._residual(x, self.output_layer_norm, self.feed_forward)
