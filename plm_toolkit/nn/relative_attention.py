"""Relative positional attention with segment memory, shared by Transformer-XL and XLNet.

Transformer-XL (Dai et al. 2019, section 3.3) replaces absolute position embeddings by a relative term in every
layer's attention score between query i and key j:

    A_ij = (E_i W_q + u) W_{k,E} E_j      (a) content + (c) global content bias u
         + (E_i W_q + v) W_{k,R} R_{i-j}  (b) content-position + (d) global position bias v

with R a fixed sinusoid of the relative distance and separate key projections W_{k,E} (``key``) and W_{k,R}
(``position``). The second term is computed for every (query, distance) pair and moved into (query, key) layout by
the O(L) shift of appendix B (``rel_shift``) instead of an L x L gather. Keys and values cover the cached memory
of earlier segments followed by the current segment. XLNet (Yang et al. 2019, section 2.5) adds a relative
segment term (s+ / s- per head, with its own bias b).

Tensors are batch first: hidden (B, T, H), memory (B, M, H), scores (B, nh, T, M + T).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from plm_toolkit.nn.feed_forward import PositionwiseFeedForward  # noqa: F401  (both families import it here)
from plm_toolkit.nn.positions import sinusoid_embedding  # noqa: F401  (R_{i-j}, re-exported for both families)


def relative_distances(
    query_len: int, key_len: int, bidirectional: bool, clamp_len: int = -1, device=None
) -> torch.Tensor:
    """The distances i - j that the position term's columns stand for, largest first.

    Causal (Transformer-XL): key_len - 1 .. 0, one per key a query may see. Bidirectional (XLNet): key_len ..
    -query_len + 1, which also covers keys after the query. ``clamp_len > 0`` caps |distance| (longer distances
    reuse the embedding of clamp_len, paper section 4.1 / the released code's ``clamp_len``).
    """
    end = -query_len if bidirectional else -1
    start = key_len if bidirectional else key_len - 1
    distances = torch.arange(start, end, -1.0, device=device)  # (R,)
    if clamp_len > 0:
        distances = distances.clamp(-clamp_len, clamp_len)
    return distances


def rel_shift(scores: torch.Tensor, key_len: int) -> torch.Tensor:
    """Move (query, distance) scores into (query, key) layout in O(L) (Transformer-XL appendix B).

    ``scores[..., i, c]`` belongs to distance ``relative_distances(...)[c]``; the result's ``[..., i, j]`` is the
    score of query i (absolute position M + i) and key j at distance M + i - j. Padding a zero column and viewing
    the flat buffer with one row fewer makes row i start c = T - 1 - i columns later (causal layout, R = K); for
    the bidirectional layout (R = K + T) dropping the first row does the same with c = T - i. Both are views plus
    one copy, never an index gather.
    """
    *lead, query_len, rel_len = scores.shape
    if rel_len == key_len:  # causal distances K-1 .. 0
        padded = F.pad(scores, (1, 0))  # (..., T, R + 1)
        padded = padded.view(*lead, rel_len + 1, query_len)  # (..., R + 1, T): the same buffer, rows re-cut
        return padded[..., 1:, :].reshape(*lead, query_len, rel_len)  # (..., T, K)
    shifted = scores.reshape(*lead, rel_len, query_len)  # (..., R, T)
    shifted = shifted[..., 1:, :].reshape(*lead, query_len, rel_len - 1)  # (..., T, R - 1)
    return shifted[..., :key_len]  # (..., T, K)


class RelativeMultiHeadAttention(nn.Module):
    """Multi-head attention with the relative score of Transformer-XL, optional XLNet segment term, memory.

    Parameters: ``query``, ``key`` (W_{k,E}), ``value``, ``position`` (W_{k,R}) and ``output`` projections without
    bias; ``content_bias`` u and ``position_bias`` v per head; with ``segments`` also ``segment_bias`` b and
    ``segment_embed`` (s+ at index 0 for the same segment, s- at 1). The residual, dropout and post-LN belong
    here as in both reference codes (``layer_norm(h + dropout(output(attention)))``).
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        head_size: int,
        dropout: float = 0.1,
        attention_dropout: float = 0.0,
        layer_norm_eps: float = 1e-12,
        segments: bool = False,
    ):
        super().__init__()
        self.num_heads, self.head_size = num_heads, head_size
        inner = num_heads * head_size
        self.query = nn.Linear(hidden_size, inner, bias=False)
        self.key = nn.Linear(hidden_size, inner, bias=False)
        self.value = nn.Linear(hidden_size, inner, bias=False)
        self.position = nn.Linear(hidden_size, inner, bias=False)
        self.output = nn.Linear(inner, hidden_size, bias=False)
        self.content_bias = nn.Parameter(torch.zeros(num_heads, head_size))  # u
        self.position_bias = nn.Parameter(torch.zeros(num_heads, head_size))  # v
        if segments:
            self.segment_bias = nn.Parameter(torch.zeros(num_heads, head_size))  # b
            self.segment_embed = nn.Parameter(torch.zeros(2, num_heads, head_size))  # s+, s-
        self.layer_norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.dropout = nn.Dropout(dropout)
        self.attention_dropout = nn.Dropout(attention_dropout)
        self.scale = 1.0 / math.sqrt(head_size)

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.num_heads, self.head_size)  # (B, L, nh, hs)

    def keys_values(self, context: torch.Tensor, positions: torch.Tensor):
        """Project memory + segment (B, K, H) and position features (B or 1, R, H) once for every stream."""
        return self.heads(self.key(context)), self.heads(self.value(context)), self.heads(self.position(positions))

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        r: torch.Tensor,
        may_attend: torch.Tensor | None,
        segment_differs: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """q (B, T, nh, hs) against k, v (B, K, nh, hs) and r (B|1, R, nh, hs) -> (B, T, nh * hs).

        ``may_attend`` is boolean, broadcastable to (B, T, K); ``segment_differs`` (B, T, K) bool selects s- over
        s+ in XLNet's segment term.
        """
        key_len = k.shape[1]
        content = torch.einsum("bind,bjnd->bnij", q + self.content_bias, k)  # (B, nh, T, K): terms (a) + (c)
        position = torch.einsum("bind,bjnd->bnij", q + self.position_bias, r)  # (B, nh, T, R): terms (b) + (d)
        scores = content + rel_shift(position, key_len)  # (B, nh, T, K)
        if segment_differs is not None:
            # XLNet section 2.5: a_ij = (q_i + b)^T s_ij with s_ij = s+ or s- by whether i and j share a segment.
            seg = torch.einsum("bind,snd->bnis", q + self.segment_bias, self.segment_embed)  # (B, nh, T, 2)
            same, other = seg[..., 0:1], seg[..., 1:2]  # (B, nh, T, 1) each
            scores = scores + torch.where(segment_differs[:, None], other, same)  # (B, nh, T, K)
        scores = scores * self.scale
        if may_attend is not None:
            # The most negative finite value rather than -inf: a row with nothing visible becomes uniform, as in
            # the reference codes, instead of NaN.
            scores = scores.masked_fill(~may_attend[:, None], torch.finfo(scores.dtype).min)
        probs = self.attention_dropout(scores.softmax(dim=-1))
        context = torch.einsum("bnij,bjnd->bind", probs, v)  # (B, T, nh, hs)
        return context.reshape(*context.shape[:2], -1)  # (B, T, nh * hs)

    def finish(self, residual: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """Output projection, dropout, residual sum and post-LN."""
        return self.layer_norm(residual + self.dropout(self.output(context)))

    def forward(
        self,
        hidden: torch.Tensor,
        memory: torch.Tensor | None,
        positions: torch.Tensor,
        may_attend: torch.Tensor | None,
        segment_differs: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """(B, T, H) with (B, M, H) memory -> (B, T, H); keys and values cover memory then segment."""
        context = hidden if memory is None else torch.cat([memory, hidden], dim=1)  # (B, M + T, H)
        k, v, r = self.keys_values(context, positions)
        attended = self.attend(self.heads(self.query(hidden)), k, v, r, may_attend, segment_differs)
        return self.finish(hidden, attended)


def update_memory(
    memory: torch.Tensor | None, hidden: torch.Tensor, mem_len: int, reuse_len: int | None = None
) -> torch.Tensor | None:
    """The next segment's memory of one layer: the last ``mem_len`` states of memory + this segment's first
    ``reuse_len`` states (all when None), with the gradient stopped (Transformer-XL section 3.2, SG(.))."""
    if mem_len <= 0:
        return None
    if reuse_len is not None and reuse_len > 0:
        hidden = hidden[:, :reuse_len]  # (B, reuse, H)
    joined = hidden if memory is None else torch.cat([memory, hidden], dim=1)  # (B, M + T, H)
    return joined[:, -mem_len:].detach()


def causal_memory_mask(query_len: int, memory_len: int, device=None) -> torch.Tensor:
    """(T, M + T) bool: query i (absolute M + i) may see every memory state and keys up to itself."""
    keys = torch.arange(memory_len + query_len, device=device)
    return keys[None, :] <= torch.arange(query_len, device=device)[:, None] + memory_len  # (T, M + T)
