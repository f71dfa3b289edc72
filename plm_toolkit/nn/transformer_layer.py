"""One Transformer layer for encoders and decoders: self-attention, an optional cross-attention block over the
encoder's states, and the position-wise feed-forward block (Vaswani et al. 2017, section 3.1).

Each sub-block is wrapped in a residual connection with dropout on its output, and a LayerNorm either after the sum
(post-LN, the paper's ``LayerNorm(x + Sublayer(x))``) or before the sub-block (pre-LN, ``x + Sublayer(LayerNorm(x))``,
which trains without warm-up at depth, Xiong et al. 2020; a pre-LN stack needs a final LayerNorm, which belongs to
the stack).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from plm_toolkit.nn.attention import MultiHeadSelfAttention
from plm_toolkit.nn.feed_forward import FeedForward


class TransformerLayer(nn.Module):
    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        intermediate_size: int,
        hidden_act: str = "relu",
        hidden_dropout: float = 0.1,
        attention_dropout: float = 0.0,
        activation_dropout: float = 0.0,
        layer_norm_eps: float = 1e-6,
        pre_ln: bool = False,
        cross_attention: bool = False,
    ):
        super().__init__()
        self.pre_ln = pre_ln
        self.self_attention = MultiHeadSelfAttention(hidden_size, num_heads, dropout=attention_dropout)
        self.self_attention_norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.cross_attention = None
        if cross_attention:
            self.cross_attention = MultiHeadSelfAttention(hidden_size, num_heads, dropout=attention_dropout)
            self.cross_attention_norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.feed_forward = FeedForward(hidden_size, intermediate_size, hidden_act)
        self.feed_forward_norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.dropout = nn.Dropout(hidden_dropout)
        # Dropout inside the feed-forward block, after the activation (fairseq's --activation-dropout; 0 in the paper).
        self.activation_dropout = nn.Dropout(activation_dropout)

    def _residual(self, x: torch.Tensor, sublayer: Callable[[torch.Tensor], torch.Tensor], norm: nn.LayerNorm):
        if self.pre_ln:
            return x + self.dropout(sublayer(norm(x)))
        return norm(x + self.dropout(sublayer(x)))

    def _feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        ff = self.feed_forward
        return ff.output(self.activation_dropout(ff.act(ff.intermediate(x))))

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        causal: bool = False,
        context: torch.Tensor | None = None,
        context_mask: torch.Tensor | None = None,
        cache: dict[str, dict[str, torch.Tensor]] | None = None,
    ) -> torch.Tensor:
        """(B, T, H) -> (B, T, H). ``mask`` (boolean, broadcastable to (B, nh, T, T)) and ``causal`` restrict the
        self-attention; ``context`` (B, S, H) with ``context_mask`` (broadcastable to (B, nh, T, S)) feeds the
        cross-attention; ``cache`` ({"self": {}, "cross": {}}) keeps keys and values for incremental decoding."""
        self_cache = cache.setdefault("self", {}) if cache is not None else None
        x = self._residual(
            x, lambda h: self.self_attention(h, mask, is_causal=causal, cache=self_cache), self.self_attention_norm
        )
        if self.cross_attention is not None:
            if context is None:
                raise ValueError("a decoder layer with cross-attention needs the encoder's states (context)")
            cross_cache = cache.setdefault("cross", {}) if cache is not None else None
            x = self._residual(
                x,
                lambda h: self.cross_attention(h, context_mask, context=context, cache=cross_cache),
                self.cross_attention_norm,
            )
        return self._residual(x, self._feed_forward, self.feed_forward_norm)
