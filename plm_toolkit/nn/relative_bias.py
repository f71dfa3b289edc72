"""T5's relative position bias (Raffel et al. 2020, section 2.1): one learned scalar per head and per bucket of
relative distance, added to the attention scores.

Distances are cut into log-spaced buckets: half of them hold one exact distance each (0, 1, 2, ...), the rest grow
logarithmically up to ``max_distance``, beyond which every distance shares the last bucket. Bidirectional
attention (the encoder) spends half of the buckets on keys after the query; causal attention (the decoder) only
sees keys at or before the query, so all buckets go to distances into the past. The arithmetic follows Mesh
TensorFlow's ``_relative_position_bucket`` in float32, so loaded checkpoints see exactly the buckets they were
trained with.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def relative_position_bucket(
    relative_position: torch.Tensor, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128
) -> torch.Tensor:
    """Bucket of each ``key position - query position`` (any integer shape, same shape out, values in
    [0, num_buckets)). Bidirectional: buckets [0, n/2) for keys at or before the query, [n/2, n) for keys after it.
    Causal: keys after the query fall in bucket 0 (they are masked anyway)."""
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative_position > 0).long() * num_buckets
        distance = relative_position.abs()
    else:
        distance = (-relative_position).clamp(min=0)
    max_exact = num_buckets // 2
    # log(d / max_exact) / log(max_distance / max_exact) of the way from max_exact to num_buckets; float32 as the
    # reference computes it, so rounding at bucket edges (16, 32, 64) agrees.
    scaled = torch.log(distance.float() / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    large = (max_exact + scaled.to(torch.long)).clamp(max=num_buckets - 1)
    return buckets + torch.where(distance < max_exact, distance, large)


class RelativePositionBias(nn.Module):
    """The (1, heads, queries, keys) bias of one stack: ``relative_attention_bias`` holds (num_buckets, heads)."""

    def __init__(self, num_heads: int, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128):
        super().__init__()
        self.bidirectional, self.num_buckets, self.max_distance = bidirectional, num_buckets, max_distance
        self.relative_attention_bias = nn.Embedding(num_buckets, num_heads)

    def forward(self, query_len: int, key_len: int, query_offset: int = 0) -> torch.Tensor:
        """Bias for queries at positions ``query_offset + [0, query_len)`` (a decoder step after cached keys)
        against keys at ``[0, key_len)``."""
        device = self.relative_attention_bias.weight.device
        queries = torch.arange(query_offset, query_offset + query_len, device=device)[:, None]  # (T, 1)
        keys = torch.arange(key_len, device=device)[None, :]  # (1, K)
        bucket = relative_position_bucket(keys - queries, self.bidirectional, self.num_buckets, self.max_distance)
        return self.relative_attention_bias(bucket).permute(2, 0, 1).unsqueeze(0)  # (1, nh, T, K)
