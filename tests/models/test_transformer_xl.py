"""Transformer-XL: memory reuse equals attending over the concatenated context; causal; memory lengths."""

import torch

from plm_toolkit.models.transformer_xl import TransformerXL, TransformerXLConfig


def tiny(**overrides) -> TransformerXL:
    config = dict(
        vocab_size=53,
        hidden_size=36,
        num_layers=2,
        num_heads=3,
        head_size=11,
        intermediate_size=37,
        mem_len=7,
        hidden_dropout=0.0,
        attention_dropout=0.0,
    )
    config.update(overrides)
    return TransformerXL(TransformerXLConfig(**config)).eval()


def test_forward_with_memory_equals_forward_over_concatenated_context():
    torch.manual_seed(0)
    model = tiny(mem_len=12)
    ids = torch.randint(0, 53, (2, 12))
    with torch.no_grad():
        full = model(ids, mem_len=0).hidden  # (B, 12, H): one segment, no memory
        first = model(ids[:, :5])
        second = model(ids[:, 5:9], memories=first.memories)
        third = model(ids[:, 9:], memories=second.memories)
    assert [m.shape for m in first.memories] == [(2, 5, 36)] * 2
    assert [m.shape for m in second.memories] == [(2, 9, 36)] * 2
    for part, lo, hi in ((first, 0, 5), (second, 5, 9), (third, 9, 12)):
        torch.testing.assert_close(part.hidden, full[:, lo:hi], atol=1e-5, rtol=1e-5)


def test_memory_is_cut_to_mem_len_and_eval_mem_len_may_be_longer():
    model = tiny(mem_len=3, eval_mem_len=10)
    ids = torch.randint(0, 53, (2, 6))
    model.train()
    assert model(ids).memories[0].shape == (2, 3, 36)
    model.eval()
    out = model(ids)
    assert out.memories[0].shape == (2, 6, 36)
    assert model(ids, memories=out.memories).memories[0].shape == (2, 10, 36)


def test_memory_has_no_gradient_and_outputs_are_causal():
    model = tiny()
    ids = torch.randint(0, 53, (1, 6))
    embeddings = model.word_embeddings
    captured = {}

    def keep(module, args, output):
        output.retain_grad()
        captured["x"] = output

    handle = embeddings.register_forward_hook(keep)
    out = model(ids)
    handle.remove()
    assert all(not m.requires_grad for m in out.memories)
    (out.hidden[0, 2] * torch.randn(36)).sum().backward()  # a plain sum of a LayerNorm output is constant
    grad = captured["x"].grad[0].abs().sum(-1)  # (T,): influence of each input position on position 2
    assert (grad[:3] > 0).all() and (grad[3:] == 0).all()


def test_clamp_len_caps_long_distances():
    torch.manual_seed(0)
    ids = torch.randint(0, 53, (2, 9))
    unclamped = tiny()
    clamped = tiny(clamp_len=3)
    clamped.load_state_dict(unclamped.state_dict())
    wide = tiny(clamp_len=9)
    wide.load_state_dict(unclamped.state_dict())
    with torch.no_grad():
        assert torch.allclose(wide(ids).hidden, unclamped(ids).hidden)  # no distance exceeds 8
        assert not torch.allclose(clamped(ids).hidden, unclamped(ids).hidden)
