"""Multi-head attention over PyTorch's fused ``scaled_dot_product_attention``: self- or cross-attention, causal
masking and an optional key/value cache.

Shared by every family with plain (absolute-position) attention: BERT, RoBERTa, ALBERT, ELECTRA, GPT, and the
decoders of the encoder-decoders. Families with relative positions (Transformer-XL, XLNet) add their score terms in
``relative_attention.py``; T5's relative bias can come in as an additive mask.

The mask contract (``attention_bias``): None, a (batch, keys) padding mask (1 / True = a token, 0 / False =
padding), or a full mask broadcastable to (batch, heads, queries, keys): boolean (True = may attend, e.g. the
block-diagonal mask of packed sequences) or additive (a float added to the scores). ``is_causal`` adds "query i
sees keys up to its own position", aligned to the last key, so that it also holds when a cache holds earlier keys.
"""

from __future__ import annotations

from dataclasses import dataclass

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


def causal_mask(query_len: int, key_len: int, device=None) -> torch.Tensor:
    """(Q, K) bool: query i, at absolute position K - Q + i, may see keys 0 .. K - Q + i."""
    keys = torch.arange(key_len, device=device)
    return keys[None, :] <= torch.arange(query_len, device=device)[:, None] + (key_len - query_len)  # (Q, K)


def attention_bias(
    mask: torch.Tensor | None, query_len: int, key_len: int, is_causal: bool, device=None
) -> torch.Tensor | None:
    """The ``attn_mask`` SDPA gets, from the mask contract above; None where SDPA's own causal path or no mask at
    all does the job (the caller then passes ``is_causal=is_causal and query_len == key_len``)."""
    if mask is not None and mask.dim() == 2:
        mask = padding_mask(mask)  # (B, 1, 1, K)
    # One query (a decoding step) is the last position: it may see every key, causality adds nothing.
    if not is_causal or query_len == 1 or (mask is None and query_len == key_len):
        return mask
    causal = causal_mask(query_len, key_len, device)[None, None]  # (1, 1, Q, K)
    if mask is None:
        return causal
    if mask.dtype == torch.bool:
        return mask & causal
    return mask.masked_fill(~causal, torch.finfo(mask.dtype).min)


@dataclass
class KVCache:
    """One attention module's cached keys and values, (B, nh, K, hs) each; self-attention appends every step's,
    cross-attention computes them once from the context and keeps them."""

    key: torch.Tensor | None = None
    value: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return 0 if self.key is None else self.key.shape[2]

    def append(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.key is not None:
            key, value = torch.cat([self.key, key], dim=2), torch.cat([self.value, value], dim=2)  # (B, nh, K, hs)
        self.key, self.value = key, value
        return key, value

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows ``index`` (B',) in that order: beam search follows its surviving beams."""
        if self.key is not None:
            self.key, self.value = self.key.index_select(0, index), self.value.index_select(0, index)


class MultiHeadAttention(nn.Module):
    """Scaled dot-product attention with ``num_heads`` heads (Vaswani et al. 2017, section 3.2.2).

    Queries come from ``x``; keys and values from ``context`` (cross-attention) or from ``x`` itself. The output
    projection is applied here; the residual dropout and the LayerNorm belong to the layer, where pre-LN and
    post-LN differ. ``head_size`` may differ from hidden_size / num_heads; ``scale`` overrides 1 / sqrt(head_size)
    (T5 uses 1).
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        head_size: int | None = None,
        scale: float | None = None,
    ):
        super().__init__()
        if head_size is None and hidden_size % num_heads != 0:
            raise ValueError(f"hidden_size {hidden_size} is not a multiple of num_heads {num_heads}")
        self.num_heads = num_heads
        self.head_size = head_size or hidden_size // num_heads
        self.dropout = dropout
        self.scale = scale
        inner = self.num_heads * self.head_size
        self.query = nn.Linear(hidden_size, inner, bias=bias)
        self.key = nn.Linear(hidden_size, inner, bias=bias)
        self.value = nn.Linear(hidden_size, inner, bias=bias)
        self.output = nn.Linear(inner, hidden_size, bias=bias)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.num_heads, self.head_size).transpose(1, 2)  # (B, nh, T, hs)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        context: torch.Tensor | None = None,
        cache: KVCache | None = None,
    ) -> torch.Tensor:
        """(B, T, H) -> (B, T, H). ``mask`` covers every key: the cached ones, then this call's (or the
        context's). With a ``cache``, self-attention appends this call's keys; cross-attention computes the
        context's once and reuses them."""
        batch, length, _ = x.shape
        q = self._split_heads(self.query(x))  # (B, nh, T, hs)
        if context is None:
            k, v = self._split_heads(self.key(x)), self._split_heads(self.value(x))  # (B, nh, T, hs)
            if cache is not None:
                k, v = cache.append(k, v)  # (B, nh, K, hs): the cached keys, then this call's
        elif cache is not None and cache.key is not None:
            k, v = cache.key, cache.value  # cross-attention: the context's keys, computed on the first step
        else:
            k, v = self._split_heads(self.key(context)), self._split_heads(self.value(context))  # (B, nh, S, hs)
            if cache is not None:
                cache.key, cache.value = k, v
        bias = attention_bias(mask, length, k.shape[2], is_causal, x.device)
        context_vectors = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=bias,
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=is_causal and bias is None and length == k.shape[2],
            scale=self.scale,
        )  # (B, nh, T, hs)
        context_vectors = context_vectors.transpose(1, 2).reshape(batch, length, -1)  # (B, T, nh * hs)
        return self.output(context_vectors)
