"""Sampled softmax (Jean et al. 2015) as TensorFlow's ``tf.nn.sampled_softmax_loss`` computes it, which ELMo's biLM
was trained with over a vocabulary of ~800K words.

One set of negative classes is drawn for the whole batch from the log-uniform (Zipfian) distribution over ids sorted
by falling frequency, P(k) = log((k + 2) / (k + 1)) / log(V + 1), without repeats (TF's ``unique=True``: draw until
``num_sampled`` distinct classes came up). Each logit is corrected by the log of its class's expected count (the
chance that the sampling picked it: 1 - (1 - P(k))^tries), a sampled class equal to a row's true class is removed
from that row ("accidental hits"), and the loss is the cross-entropy of the true class against the sampled ones.
No library offers this for PyTorch (allennlp's version draws differently), so it is written here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class Candidates:
    # (S,) distinct sampled class ids, in the order they came up.
    ids: torch.Tensor
    # (S,) the expected count of each: how likely the sampling was to pick it.
    expected_count: torch.Tensor
    # How many draws it took to find S distinct classes.
    tries: int


def log_uniform_probability(ids: torch.Tensor, num_classes: int) -> torch.Tensor:
    ids = ids.double()
    return (torch.log(ids + 2.0) - torch.log(ids + 1.0)) / math.log(num_classes + 1.0)


def expected_count(ids: torch.Tensor, num_classes: int, num_sampled: int, tries: int) -> torch.Tensor:
    """TF's ExpectedCountHelper: P * S for sampling with replacement, else 1 - (1 - P)^tries."""
    p = log_uniform_probability(ids, num_classes)
    if tries == num_sampled:
        return (p * num_sampled).float()
    return (-torch.expm1(tries * torch.log1p(-p))).float()


def log_uniform_draws(count: int, num_classes: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` independent log-uniform draws from [0, num_classes) (TF's LogUniformSampler::Sample)."""
    draws = np.exp(rng.random(count) * math.log(num_classes + 1.0)).astype(np.int64) - 1
    return draws % num_classes  # exp(u log(V + 1)) - 1 may round up to V


def sample_log_uniform(num_sampled: int, num_classes: int, generator: torch.Generator | None = None) -> Candidates:
    """``num_sampled`` distinct ids of [0, num_classes) drawn log-uniformly, as TF's log_uniform_candidate_sampler
    with unique=True. The draws come from a numpy generator seeded by torch's (``generator`` or the global one), so
    ``torch.manual_seed`` fixes them."""
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    rng = np.random.default_rng(seed)
    if num_sampled >= num_classes:
        raise ValueError(f"cannot draw {num_sampled} distinct classes out of {num_classes}")
    used = np.zeros(num_classes, dtype=bool)
    picked: list[np.ndarray] = []
    count, tries, chunk = 0, 0, 2 * num_sampled
    while count < num_sampled:
        draws = log_uniform_draws(chunk, num_classes, rng)
        values, first = np.unique(draws, return_index=True)  # each value once, with its first draw
        fresh = ~used[values]
        values, first = values[fresh], first[fresh]
        order = np.argsort(first)
        values, first = values[order], first[order]  # new classes in the order they came up
        needed = num_sampled - count
        if len(values) >= needed:
            picked.append(values[:needed])
            tries += int(first[needed - 1]) + 1
            count = num_sampled
        else:
            picked.append(values)
            used[values] = True
            tries += chunk
            count += len(values)
            chunk *= 2
    ids = torch.from_numpy(np.concatenate(picked))
    return Candidates(ids, expected_count(ids, num_classes, num_sampled, tries), tries)


def sampled_softmax_loss(
    hidden: torch.Tensor,
    targets: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    candidates: Candidates,
) -> torch.Tensor:
    """Per-row loss (N,) of hidden (N, D) with true classes targets (N,) against the sampled ``candidates``, over an
    output layer weight (V, D), bias (V,)."""
    num_classes = weight.shape[0]
    sampled = candidates.ids.to(hidden.device)
    true_count = expected_count(targets.detach().cpu(), num_classes, len(sampled), candidates.tries).to(hidden.device)
    true_logits = (hidden * weight[targets]).sum(dim=-1) + bias[targets] - torch.log(true_count)  # (N,)
    sampled_logits = hidden @ weight[sampled].t() + bias[sampled]  # (N, S)
    sampled_logits = sampled_logits - torch.log(candidates.expected_count.to(hidden.device))
    hits = targets[:, None] == sampled[None, :]  # (N, S): a row's own class drawn as a negative
    sampled_logits = sampled_logits.masked_fill(hits, torch.finfo(sampled_logits.dtype).min)
    logits = torch.cat([true_logits[:, None], sampled_logits], dim=1)  # (N, 1 + S)
    return torch.logsumexp(logits, dim=1) - true_logits
