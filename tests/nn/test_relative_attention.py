"""The shared relative-attention pieces: the O(L) shift, distances, memory masks and memory updates."""

import pytest
import torch

from plm_toolkit.nn.relative_attention import (
    RelativeMultiHeadAttention,
    causal_memory_mask,
    rel_shift,
    relative_distances,
    sinusoid_embedding,
    update_memory,
)


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize(("query_len", "memory_len"), [(1, 0), (5, 0), (4, 3), (7, 11)])
def test_rel_shift_equals_explicit_relative_indexing(bidirectional, query_len, memory_len):
    key_len = memory_len + query_len
    distances = relative_distances(query_len, key_len, bidirectional)
    scores = torch.randn(2, 3, query_len, len(distances))  # (B, nh, T, R)
    shifted = rel_shift(scores, key_len)
    assert shifted.shape == (2, 3, query_len, key_len)
    # The L x L gather the shift replaces: column of distance M + i - j for query i, key j.
    column = {int(d): c for c, d in enumerate(distances.tolist())}
    for i in range(query_len):
        for j in range(key_len):
            distance = memory_len + i - j
            if bidirectional or distance >= 0:  # causal layouts hold only the distances a query may see
                assert torch.equal(shifted[..., i, j], scores[..., i, column[distance]]), (i, j)


def test_relative_distances_and_clamp():
    assert relative_distances(3, 5, False).tolist() == [4, 3, 2, 1, 0]
    assert relative_distances(3, 5, True).tolist() == [5, 4, 3, 2, 1, 0, -1, -2]
    assert relative_distances(3, 5, True, clamp_len=2).tolist() == [2, 2, 2, 2, 1, 0, -1, -2]
    emb = sinusoid_embedding(torch.tensor([0.0, 3.0]), 6)
    assert emb.shape == (2, 6) and torch.allclose(emb[0], torch.tensor([0.0, 0, 0, 1, 1, 1]))


def test_causal_memory_mask_sees_memory_and_past():
    mask = causal_memory_mask(3, 2)
    assert mask.tolist() == [
        [True, True, True, False, False],
        [True, True, True, True, False],
        [True, True, True, True, True],
    ]


def test_update_memory_keeps_last_states_without_gradient():
    old = torch.randn(2, 4, 5)
    new = torch.randn(2, 3, 5, requires_grad=True)
    memory = update_memory(old, new, mem_len=5)
    assert memory.shape == (2, 5, 5) and not memory.requires_grad
    assert torch.equal(memory[:, :2], old[:, 2:]) and torch.equal(memory[:, 2:], new.detach())
    reused = update_memory(old, new, mem_len=6, reuse_len=2)  # XLNet caches only the reused prefix
    assert torch.equal(reused[:, 4:], new.detach()[:, :2])
    assert update_memory(old, new, mem_len=0) is None


def test_attention_ignores_masked_keys():
    torch.manual_seed(0)
    att = RelativeMultiHeadAttention(12, 3, 5, dropout=0.0, segments=True).eval()
    for p in att.parameters():
        torch.nn.init.normal_(p)
    hidden, memory = torch.randn(2, 4, 12), torch.randn(2, 3, 12)
    positions = sinusoid_embedding(relative_distances(4, 7, True), 12)[None]
    may = torch.ones(2, 4, 7, dtype=torch.bool)
    may[:, :, 1] = False
    out = att(hidden, memory, positions, may, torch.zeros(2, 4, 7, dtype=torch.bool))
    changed = memory.clone()
    changed[:, 1] += 5.0  # a key nobody may see
    assert torch.allclose(out, att(hidden, changed, positions, may, torch.zeros(2, 4, 7, dtype=torch.bool)))
    changed[:, 0] += 5.0  # a visible key
    assert not torch.allclose(out, att(hidden, changed, positions, may, torch.zeros(2, 4, 7, dtype=torch.bool)))
