"""linear_cross_entropy: the values and gradients of plain cross-entropy, chunked or in one piece."""

import pytest
import torch
import torch.nn.functional as F

from plm_toolkit.nn.losses import linear_cross_entropy


@pytest.mark.parametrize("rows", [5, 13])  # one chunk of 8 (plain path) and two chunks (fused path)
@pytest.mark.parametrize("with_bias", [False, True])
def test_equals_plain_cross_entropy(rows, with_bias):
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(rows, 6, generator=generator, requires_grad=True)
    weight = torch.randn(11, 6, generator=generator, requires_grad=True)
    bias = torch.randn(11, generator=generator, requires_grad=True) if with_bias else None
    targets = torch.randint(0, 11, (rows,), generator=generator)
    loss, correct = linear_cross_entropy(hidden, weight, bias, targets, chunk=8)
    (loss * 0.3).backward()
    got = [p.grad.clone() for p in (hidden, weight, bias) if p is not None]
    for p in (hidden, weight, bias):
        if p is not None:
            p.grad = None
    logits = F.linear(hidden, weight, bias)
    expected = F.cross_entropy(logits, targets, reduction="sum")
    (expected * 0.3).backward()
    assert torch.allclose(loss, expected, atol=1e-5)
    assert int(correct) == int((logits.argmax(-1) == targets).sum())
    for g, p in zip(got, [p for p in (hidden, weight, bias) if p is not None], strict=True):
        assert torch.allclose(g, p.grad, atol=1e-5)
