"""The shared attention and layer: the mask contract, causal masking over a cache, cross-attention, pre-/post-LN."""

import pytest
import torch

from plm_toolkit.nn.attention import KVCache, MultiHeadAttention, attention_bias
from plm_toolkit.nn.layers import LayerCache, TransformerLayer
from plm_toolkit.training.optim import parameter_groups

HIDDEN, HEADS = 36, 3


def explicit_attention(module, x, allowed, context=None):
    """Softmax attention written out, the reference for SDPA's masked paths."""
    source = x if context is None else context
    heads = lambda t: t.view(t.shape[0], t.shape[1], HEADS, -1).transpose(1, 2)  # (B, nh, T, hs)
    q, k, v = heads(module.query(x)), heads(module.key(source)), heads(module.value(source))
    scores = q @ k.transpose(-1, -2) / (q.shape[-1] ** 0.5)  # (B, nh, T, S)
    probs = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
    return module.output((probs @ v).transpose(1, 2).reshape(x.shape[0], x.shape[1], -1))


def test_padding_and_full_masks_are_the_same_contract():
    attention = MultiHeadAttention(HIDDEN, HEADS).eval()
    x = torch.randn(2, 7, HIDDEN)
    padding = torch.tensor([[1] * 7, [1] * 4 + [0] * 3])
    full = padding.bool()[:, None, None, :].expand(2, 1, 7, 7)  # (B, 1, Q, K)
    causal = torch.ones(7, 7).tril().bool()
    with torch.no_grad():
        a = attention(x, padding, is_causal=True)
        b = attention(x, full, is_causal=True)
        c = attention(x, full & causal)
        expected = explicit_attention(attention, x, full & causal)
    for out in (a, b, c):
        torch.testing.assert_close(out[padding.bool()], expected[padding.bool()])


def test_block_diagonal_mask_keeps_packed_sequences_apart():
    """A (B, 1, T, T) block-diagonal mask (sequences packed in one row) with is_causal: no token sees another
    sequence, each sequence reads as if alone."""
    attention = MultiHeadAttention(HIDDEN, HEADS).eval()
    x = torch.randn(1, 9, HIDDEN)
    segment = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 1])
    block = (segment[:, None] == segment[None, :])[None, None]  # (1, 1, 9, 9)
    with torch.no_grad():
        packed = attention(x, block, is_causal=True)
        first = attention(x[:, :4], is_causal=True)
        second = attention(x[:, 4:], is_causal=True)
    torch.testing.assert_close(packed, torch.cat([first, second], dim=1))


def test_causal_mask_is_aligned_to_the_last_key():
    bias = attention_bias(None, 2, 5, True)
    assert bias.squeeze().tolist() == [[True, True, True, True, False], [True, True, True, True, True]]
    additive = torch.zeros(1, 1, 2, 5)
    assert attention_bias(additive, 2, 5, True)[0, 0, 0, 4] == torch.finfo(torch.float32).min
    assert attention_bias(None, 4, 4, True) is None  # SDPA's own causal path


@pytest.mark.parametrize("pre_norm", [False, True])
def test_cached_decoding_equals_recomputing(pre_norm):
    layer = TransformerLayer(HIDDEN, HEADS, 37, "gelu_tanh", pre_norm=pre_norm).eval()
    x = torch.randn(2, 9, HIDDEN)
    with torch.no_grad():
        full = layer(x, is_causal=True)
        cache = LayerCache()
        steps = [layer(x[:, :5], is_causal=True, cache=cache)]
        steps += [layer(x[:, t : t + 1], is_causal=True, cache=cache) for t in range(5, 9)]
    assert cache.self_attention.length == 9
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-6, rtol=1e-5)


def test_changing_a_later_token_never_changes_an_earlier_output():
    layer = TransformerLayer(HIDDEN, HEADS, 37, pre_norm=True).eval()
    x = torch.randn(1, 8, HIDDEN)
    y = x.clone()
    y[:, 5:] = torch.randn(1, 3, HIDDEN)
    with torch.no_grad():
        a, b = layer(x, is_causal=True), layer(y, is_causal=True)
    assert torch.equal(a[:, :5], b[:, :5]) and not torch.allclose(a[:, 5:], b[:, 5:])


def test_cross_attention_reads_the_context_and_caches_it_once():
    layer = TransformerLayer(HIDDEN, HEADS, 37, cross_attention=True, pre_norm=True).eval()
    x, context = torch.randn(2, 4, HIDDEN), torch.randn(2, 6, HIDDEN)
    context_mask = torch.tensor([[1] * 6, [1] * 3 + [0] * 3])
    with torch.no_grad():
        full = layer(x, is_causal=True, context=context, context_mask=context_mask)
        cache = LayerCache()
        steps = [
            layer(x[:, t : t + 1], is_causal=True, context=context, context_mask=context_mask, cache=cache)
            for t in range(4)
        ]
        other = layer(x, is_causal=True, context=torch.randn(2, 6, HIDDEN), context_mask=context_mask)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-6, rtol=1e-5)
    assert cache.cross_attention.length == 6 and not torch.allclose(other, full)
    # The padding of the context is never read: changing it changes nothing.
    changed = context.clone()
    changed[1, 3:] = 9.0
    with torch.no_grad():
        again = layer(x, is_causal=True, context=changed, context_mask=context_mask)
    torch.testing.assert_close(again, full)


def test_cache_reorder_follows_beams():
    cache = KVCache()
    cache.append(torch.arange(3.0)[:, None, None, None].expand(3, 1, 2, 4), torch.zeros(3, 1, 2, 4))
    cache.reorder(torch.tensor([2, 2, 0]))
    assert cache.key[:, 0, 0, 0].tolist() == [2.0, 2.0, 0.0]


def test_post_ln_layer_is_bert_arrangement():
    layer = TransformerLayer(HIDDEN, HEADS, 37, hidden_dropout=0.0, attention_dropout=0.0).eval()
    x = torch.randn(2, 5, HIDDEN)
    with torch.no_grad():
        h = layer.attention_layer_norm(x + layer.attention(x))
        expected = layer.output_layer_norm(h + layer.feed_forward(h))
        torch.testing.assert_close(layer(x), expected)


def test_weight_decay_is_chosen_by_shape():
    module = torch.nn.ModuleDict(
        {
            "linear": torch.nn.Linear(4, 4),
            "rms": torch.nn.RMSNorm(4),
            "layer": TransformerLayer(HIDDEN, HEADS, 37, norm="rms"),
        }
    )
    module.register_parameter("position_bias", torch.nn.Parameter(torch.zeros(3, 4)))  # a per-head bias
    decay, rest = parameter_groups(module, 0.1)
    decayed = {id(p) for p in decay["params"]}
    for name, p in module.named_parameters():
        assert (id(p) in decayed) == (p.dim() >= 2 and not name.endswith("bias")), name
    assert id(module["rms"].weight) not in decayed
