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
    return attention_mask.bool()[:, None, None, :]  # (B, 1, 1, T)


class MultiHeadSelfAttention(nn.Module):
    """Scaled dot-product attention with ``num_heads`` heads (Vaswani et al. 2017, section 3.2.2): self-attention,
    or cross-attention over a ``context`` (the encoder-decoder attention of section 3.2.3), with an optional
    key/value cache for incremental decoding.

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

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        context: torch.Tensor | None = None,
        cache: dict[str, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """(B, T, H) -> (B, T, H).

        ``context`` (B, S, H): the states keys and values come from (cross-attention, the decoder reading the
        encoder); None attends over ``x`` itself. ``cache`` (a dict owned by the caller, one per layer and attention)
        keeps keys and values between incremental decoding calls: self-attention appends this call's to those of
        the earlier calls, and with ``is_causal`` query i of this call sees every cached key and the new keys up to
        itself; cross-attention projects ``context`` on the first call and reuses it after.
        """
        batch, length, hidden = x.shape
        q = self._split_heads(self.query(x))  # (B, nh, T, hs)
        if context is not None and cache is not None and "key" in cache:
            k, v = cache["key"], cache["value"]  # (B, nh, S, hs) projected on an earlier call
        else:
            source = x if context is None else context
            k = self._split_heads(self.key(source))  # (B, nh, S, hs)
            v = self._split_heads(self.value(source))  # (B, nh, S, hs)
            if cache is not None and context is None and "key" in cache:
                k = torch.cat([cache["key"], k], dim=2)  # (B, nh, past + T, hs)
                v = torch.cat([cache["value"], v], dim=2)
            if cache is not None:
                cache["key"], cache["value"] = k, v
        past = k.shape[2] - length if context is None else 0
        if is_causal and past > 0:
            # Query i of this call is position past + i: it sees keys 0 .. past + i.
            keys = torch.arange(past + length, device=x.device)
            causal = keys[None, :] <= torch.arange(length, device=x.device)[:, None] + past  # (T, past + T)
            mask = causal if mask is None else mask & causal
            is_causal = False
        elif is_causal and mask is not None:
            causal = torch.ones(length, length, dtype=torch.bool, device=x.device).tril()  # (T, T)
            mask = mask & causal if mask.dtype == torch.bool else mask.masked_fill(~causal, float("-inf"))
            is_causal = False
        context_out = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=is_causal,
        )  # (B, nh, T, hs)
        context_out = context_out.transpose(1, 2).reshape(batch, length, hidden)  # (B, T, H)
        return self.output(context_out)
