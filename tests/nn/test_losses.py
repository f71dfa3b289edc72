"""The chunked linear cross-entropy gives plain cross-entropy's loss, argmax count and gradients."""

import pytest
import torch
import torch.nn.functional as F

from plm_toolkit.nn.losses import chunk_rows, linear_cross_entropy


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("chunk", [5, 16, 1000])
def test_same_loss_and_gradients_as_plain_cross_entropy(with_bias, chunk):
    torch.manual_seed(0)
    hidden = torch.randn(37, 13, requires_grad=True)
    weight = torch.randn(101, 13, requires_grad=True)
    bias = torch.randn(101, requires_grad=True) if with_bias else None
    targets = torch.randint(0, 101, (37,))
    params = [hidden, weight] + ([bias] if with_bias else [])

    loss, correct = linear_cross_entropy(hidden, weight, bias, targets, chunk)
    (0.7 * loss).backward()
    ours = [p.grad.clone() for p in params]
    for p in params:
        p.grad = None
    logits = F.linear(hidden, weight, bias)
    reference = F.cross_entropy(logits, targets, reduction="sum")
    (0.7 * reference).backward()
    torch.testing.assert_close(loss, reference, rtol=1e-6, atol=1e-4)
    assert correct.item() == (logits.argmax(-1) == targets).sum().item()
    for mine, theirs in zip(ours, (p.grad for p in params), strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        evaluated, _ = linear_cross_entropy(hidden, weight, bias, targets, chunk)
    torch.testing.assert_close(evaluated, reference, rtol=1e-6, atol=1e-4)


def test_chunks_hold_at_least_a_thousand_rows():
    assert chunk_rows(50257) == 1335 and chunk_rows(600) == (1 << 26) // 600 and chunk_rows(10**8) == 1024


@pytest.mark.gpu
def test_cuda_autocast_keeps_the_projection_in_bf16_and_matches_plain():
    torch.manual_seed(0)
    hidden = torch.randn(300, 64, device="cuda", requires_grad=True)
    weight = torch.randn(5000, 64, device="cuda", requires_grad=True)
    targets = torch.randint(0, 5000, (300,), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss, _ = linear_cross_entropy(hidden, weight, None, targets, chunk=128)
    loss.backward()
    ours = hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None
    with torch.autocast("cuda", dtype=torch.bfloat16):
        reference = F.cross_entropy(F.linear(hidden, weight).float(), targets, reduction="sum")
    reference.backward()
    torch.testing.assert_close(loss, reference, rtol=1e-3, atol=1e-2)
    torch.testing.assert_close(ours[0], hidden.grad, rtol=5e-2, atol=5e-2)
    torch.testing.assert_close(ours[1], weight.grad, rtol=5e-2, atol=5e-2)
    assert ours[1].dtype == torch.float32
