"""Sampled softmax as TF computes it: log-uniform candidates, expected counts, accidental hits; its expected loss
approaches the full softmax's."""

import numpy as np
import torch
import torch.nn.functional as F

from plm_toolkit.nn.sampled_softmax import (
    log_uniform_draws,
    log_uniform_probability,
    sample_log_uniform,
    sampled_softmax_loss,
)
from plm_toolkit.nn.scalar_mix import ScalarMix


def test_single_draws_follow_the_log_uniform_distribution():
    draws = log_uniform_draws(200_000, 50, np.random.default_rng(0))
    counts = torch.from_numpy(np.bincount(draws, minlength=50)).float()
    expected = log_uniform_probability(torch.arange(50), 50).float()
    assert abs(float(expected.sum()) - 1.0) < 1e-6
    torch.testing.assert_close(counts / 200_000, expected, atol=0.003, rtol=0)


def test_candidates_are_distinct_and_expected_counts_match_inclusion_rates():
    generator = torch.Generator().manual_seed(1)
    hits, predicted = torch.zeros(40), torch.zeros(40)
    for _ in range(3000):
        c = sample_log_uniform(10, 40, generator)
        assert len(set(c.ids.tolist())) == 10 and c.tries >= 10
        hits[c.ids] += 1
        predicted[c.ids] += c.expected_count
    # For a drawn class, its expected count is TF's estimate of the chance it was drawn: on average over draws the
    # estimates of the drawn classes track how often they came up.
    rate, mean_estimate = hits / 3000, predicted / hits.clamp(min=1)
    torch.testing.assert_close(mean_estimate[:10], rate[:10], atol=0.05, rtol=0.1)


def test_expected_sampled_loss_is_close_to_the_full_softmax_loss():
    torch.manual_seed(0)
    classes, width, rows = 200, 16, 64
    weight, bias = torch.randn(classes, width) * 0.5, torch.randn(classes) * 0.5
    targets = torch.multinomial(log_uniform_probability(torch.arange(classes), classes).float(), rows, True)
    hidden = weight[targets] * 1.5 + torch.randn(rows, width) * 0.5  # a model that mostly knows the answer
    full = float(F.cross_entropy(hidden @ weight.t() + bias, targets))
    generator = torch.Generator().manual_seed(2)

    def mean_sampled(num_sampled: int) -> float:
        losses = [
            sampled_softmax_loss(hidden, targets, weight, bias, sample_log_uniform(num_sampled, classes, generator))
            for _ in range(200)
        ]
        return float(torch.stack(losses).mean())

    near, far = mean_sampled(150), mean_sampled(50)
    # Without the expected-count correction (-11%) or with accidental hits kept (+11%) this is off by > 5%.
    assert abs(near - full) / full < 0.05, (near, full)
    assert abs(near - full) < abs(far - full)  # more negatives, closer to the full softmax


def test_sampled_loss_has_gradients_for_true_and_sampled_rows_only():
    weight = torch.randn(30, 4, requires_grad=True)
    bias = torch.zeros(30, requires_grad=True)
    hidden, targets = torch.randn(3, 4), torch.tensor([0, 5, 7])
    candidates = sample_log_uniform(6, 30, torch.Generator().manual_seed(0))
    sampled_softmax_loss(hidden, targets, weight, bias, candidates).sum().backward()
    touched = set(torch.nonzero(weight.grad.abs().sum(dim=1)).flatten().tolist())
    assert touched <= set(candidates.ids.tolist()) | {0, 5, 7}


def test_scalar_mix_weights_sum_to_one_and_mix_layers():
    mix = ScalarMix(3)
    with torch.no_grad():
        mix.weights.copy_(torch.tensor([0.3, -1.2, 2.0]))
        mix.gamma.fill_(0.5)
    weights = mix.normalized_weights().detach()
    assert abs(float(weights.sum()) - 1.0) < 1e-6 and (weights > 0).all()
    layers = [torch.randn(2, 5, 7) for _ in range(3)]
    expected = 0.5 * sum(w * layer for w, layer in zip(weights, layers, strict=True))
    torch.testing.assert_close(mix(layers), expected)
    mix(layers).sum().backward()
    assert mix.weights.grad is not None and mix.gamma.grad is not None
