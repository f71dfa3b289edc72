"""Label smoothing: the loss equals the formula of the convention we name, and PyTorch's implementation of it."""

import torch
import torch.nn.functional as F

from plm_toolkit.nn.losses import label_smoothed_cross_entropy


def test_label_smoothed_loss_equals_the_formula():
    torch.manual_seed(0)
    logits, gold, eps = torch.randn(7, 11) * 3, torch.randint(0, 11, (7,)), 0.1
    loss, nll = label_smoothed_cross_entropy(logits, gold, eps)
    # Written out: q = (1 - eps) onehot + eps / V; loss = -sum_k q_k log p_k, summed over the targets.
    log_p = logits.log_softmax(-1)
    q = torch.full((7, 11), eps / 11)
    q[torch.arange(7), gold] += 1 - eps
    assert torch.allclose(loss, -(q * log_p).sum(), atol=1e-5)
    assert torch.allclose(nll, -log_p[torch.arange(7), gold].sum(), atol=1e-5)
    assert torch.allclose(loss, F.cross_entropy(logits, gold, reduction="sum", label_smoothing=eps), atol=1e-5)
    # The smoothed loss never reaches 0: a confident, correct model pays for the eps mass it puts nowhere else.
    sure = torch.full((1, 11), -30.0)
    sure[0, 3] = 30.0
    smoothed, plain = label_smoothed_cross_entropy(sure, torch.tensor([3]), eps)
    assert plain < 1e-6 and smoothed > 5.0
    zero_eps, _ = label_smoothed_cross_entropy(logits, gold, 0.0)
    assert torch.allclose(zero_eps, nll)


def test_gradient_flows_through_the_smoothed_loss_only():
    logits = torch.randn(4, 5, requires_grad=True)
    loss, nll = label_smoothed_cross_entropy(logits, torch.tensor([0, 1, 2, 3]), 0.1)
    assert not nll.requires_grad
    loss.backward()
    # d loss / d logits = p - q per row: rows sum to zero.
    assert torch.allclose(logits.grad.sum(-1), torch.zeros(4), atol=1e-6)
