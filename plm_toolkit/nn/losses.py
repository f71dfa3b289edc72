"""Label-smoothed cross-entropy (Szegedy et al. 2016, section 7; the Transformer's regularizer, Vaswani et al.
2017, section 5.4, epsilon_ls = 0.1).

One convention, Szegedy et al.'s and PyTorch's (``F.cross_entropy(label_smoothing=eps)``): the target distribution
is q = (1 - eps) * onehot(gold) + eps / V over all V classes (the gold class included, so it gets
1 - eps + eps / V), and the loss per target is

    loss = (1 - eps) * (-log p_gold) + eps * mean_k(-log p_k).

fairseq spreads eps over the V - 1 other classes instead (gold gets exactly 1 - eps); the two differ by eps / V on
the gold class, a 3e-6 shift of the target at V = 37,000. ``eps = 0`` is plain cross-entropy.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def label_smoothed_cross_entropy(
    logits: torch.Tensor, gold: torch.Tensor, epsilon: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, V) logits and (N,) gold ids -> (smoothed loss summed over the N targets, plain NLL summed), in fp32.

    The NLL is what perplexity and model comparisons read; the smoothed loss is what training minimizes. One
    log-softmax serves both (equal to ``F.cross_entropy(..., label_smoothing=epsilon)``, tested).
    """
    log_probs = F.log_softmax(logits.float(), dim=-1)  # (N, V)
    nll = -log_probs.gather(-1, gold[:, None]).squeeze(-1)  # (N,)
    if epsilon == 0.0:
        return nll.sum(), nll.detach().sum()
    uniform = -log_probs.mean(dim=-1)  # (N,): the cross-entropy against eps / V on every class
    loss = (1.0 - epsilon) * nll + epsilon * uniform
    return loss.sum(), nll.detach().sum()
