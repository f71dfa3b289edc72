"""T5's relative position buckets: hand-computed values for both directions, and the reference over a range."""

import math

import pytest
import torch

from plm_toolkit.nn.relative_bias import RelativePositionBias, relative_position_bucket


def by_hand(distance: int, exact: int, buckets: int, max_distance: int = 128) -> int:
    """The bucket of a non-negative distance worked out on paper: exact below ``exact``, then
    exact + floor(log(d / exact) / log(max_distance / exact) * (buckets - exact)), capped at buckets - 1."""
    if distance < exact:
        return distance
    return min(exact + math.floor(math.log(distance / exact) / math.log(max_distance / exact) * (buckets - exact)),
               buckets - 1)  # fmt: skip


# key - query -> bucket, bidirectional (encoder), 32 buckets, max distance 128: 16 buckets per direction, 8 exact.
# Keys before the query: 0..7 exact; 8 -> 8 + floor(log(1)/log(16) * 8) = 8; 12 -> 8 + floor(0.146 * 8) = 9;
# 16 -> 8 + 2 = 10; 32 -> 12; 64 -> 14; 100 -> 8 + floor(0.911 * 8) = 15; 128 and beyond -> 15 (the cap).
# Keys after the query: the same plus 16.
BIDIRECTIONAL = {0: 0, -1: 1, -7: 7, -8: 8, -11: 8, -12: 9, -16: 10, -32: 12, -64: 14, -100: 15, -128: 15,
                 -1000: 15, 1: 17, 7: 23, 8: 24, 16: 26, 32: 28, 64: 30, 127: 31, 128: 31, 1000: 31}  # fmt: skip
# Causal (decoder): 32 buckets for the past, 16 exact; 23 -> 16 + floor(log(23/16)/log(8) * 16) = 16 + 2 = 18;
# 24 -> 19; 32 -> 16 + floor(16/3) = 21; 45 -> 23; 46 -> 24; 64 -> 26; 100 -> 30; 127 -> 31; future keys -> 0.
CAUSAL = {0: 0, 1: 0, 5: 0, -1: 1, -15: 15, -16: 16, -17: 16, -23: 18, -24: 19, -32: 21, -45: 23, -46: 24,
          -64: 26, -100: 30, -127: 31, -128: 31, -500: 31}  # fmt: skip


@pytest.mark.parametrize(("bidirectional", "table"), [(True, BIDIRECTIONAL), (False, CAUSAL)])
def test_buckets_match_hand_computed_values(bidirectional, table):
    relative = torch.tensor(list(table))
    got = relative_position_bucket(relative, bidirectional, num_buckets=32, max_distance=128)
    assert got.tolist() == list(table.values())


def test_hand_formula_agrees_with_the_tables():
    # The tables above are the formula evaluated by hand; this keeps them honest away from bucket edges.
    for rel, bucket in BIDIRECTIONAL.items():
        if abs(rel) not in (16, 32, 64):  # exact powers of two sit on float edges, checked against the reference
            assert (16 if rel > 0 else 0) + by_hand(abs(rel), 8, 16) == bucket
    for rel, bucket in CAUSAL.items():
        if -rel not in (32, 64):
            assert by_hand(max(-rel, 0), 16, 32) == bucket


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(("num_buckets", "max_distance"), [(32, 128), (11, 37)])
def test_buckets_equal_transformers(bidirectional, num_buckets, max_distance):
    t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    relative = torch.arange(-600, 601)
    ours = relative_position_bucket(relative, bidirectional, num_buckets, max_distance)
    theirs = t5.T5Attention._relative_position_bucket(relative, bidirectional, num_buckets, max_distance)
    assert torch.equal(ours, theirs)


def test_bias_table_shape_and_offset():
    bias = RelativePositionBias(num_heads=3, bidirectional=False, num_buckets=8, max_distance=20)
    full = bias(query_len=5, key_len=5)  # (1, nh, T, K)
    assert full.shape == (1, 3, 5, 5)
    # A decoder step at position 4 after 4 cached keys sees the last row of the full table.
    step = bias(query_len=1, key_len=5, query_offset=4)
    assert torch.equal(step, full[:, :, 4:5])
    # Bucket 0 (distance 0) lies on the diagonal.
    assert torch.equal(full[0, :, 2, 2], bias.relative_attention_bias.weight[0])
