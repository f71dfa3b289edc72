"""Cross-entropy through a vocabulary projection without materializing all the logits.

A causal LM predicts at every position: N = batch x length rows of a (N, V) logit matrix, 1.6 GB in fp32 for 8 x 1024
tokens of GPT-2's 50,257 entries, plus as much again for its softmax and its gradient. ``linear_cross_entropy``
walks the rows in chunks: each chunk's logits give its loss and, straight away, their gradient (softmax minus the
one-hot target), which is folded into the gradients of the hidden states and of the weight before the next chunk;
backward then only scales those by the incoming gradient. Peak memory is one chunk's logits, and the projection
costs the same three matmuls as the plain form (forward, and the two of its backward). Written here because torch
has no fused linear + cross-entropy; the idea is that of Liger-Kernel's FusedLinearCrossEntropy and of
Wijmans et al. 2024 ("Cut Your Losses in Large-Vocabulary Language Models").

Label-smoothed cross-entropy (Szegedy et al. 2016, section 7; the Transformer's regularizer, Vaswani et al.
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

# Logit elements per chunk (256 MiB in fp32), and at least 1024 rows: the weight-gradient matmul sums over a
# chunk's rows, and fewer rows than that make it markedly slower on a CPU (measured: 128 rows 1.4x slower per
# step than 1024 at GPT-2's vocabulary).
CHUNK_ELEMENTS = 1 << 26


def chunk_rows(vocab_size: int) -> int:
    return max(1024, CHUNK_ELEMENTS // max(vocab_size, 1))


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, chunk):
        loss = hidden.new_zeros((), dtype=torch.float32)
        correct = torch.zeros((), dtype=torch.long, device=hidden.device)
        grad_hidden = torch.empty_like(hidden)
        grad_weight = None  # (V, H) fp32, started by the first chunk's matmul (no zero fill)
        grad_bias = torch.zeros_like(bias, dtype=torch.float32) if bias is not None else None
        for start in range(0, hidden.shape[0], chunk):
            h, gold = hidden[start : start + chunk], targets[start : start + chunk]  # (C, H), (C,)
            rows = torch.arange(gold.shape[0], device=gold.device)
            raw = F.linear(h, weight, bias)  # (C, V), in the autocast dtype where autocast is on
            logits = raw.float()
            log_z = torch.logsumexp(logits, dim=-1)  # (C,)
            loss += (log_z - logits[rows, gold]).sum()
            correct += (logits.argmax(dim=-1) == gold).sum()
            # d loss / d logits = softmax - one-hot, written over the logits' own buffer.
            grad_logits = logits.sub_(log_z[:, None]).exp_()  # (C, V)
            grad_logits[rows, gold] -= 1.0
            grad_logits, compute = grad_logits.to(raw.dtype), raw.dtype  # the matmuls in the forward's precision
            grad_hidden[start : start + chunk] = grad_logits @ weight.to(compute)  # (C, H)
            if grad_weight is None:
                grad_weight = (grad_logits.T @ h.to(compute)).float()  # (V, H)
            elif compute == grad_weight.dtype:
                grad_weight.addmm_(grad_logits.T, h.to(compute))  # accumulated in place
            else:
                grad_weight += (grad_logits.T @ h.to(compute)).float()
            if grad_bias is not None:
                grad_bias += grad_logits.float().sum(dim=0)
        ctx.save_for_backward(grad_hidden, grad_weight, grad_bias)
        ctx.weight_dtype, ctx.bias_dtype = weight.dtype, None if bias is None else bias.dtype
        ctx.mark_non_differentiable(correct)
        return loss, correct

    @staticmethod
    def backward(ctx, grad_loss, _grad_correct):
        grad_hidden, grad_weight, grad_bias = ctx.saved_tensors
        # In place: the saved gradients are used once (the (V, H) one is as large as the embedding).
        grad_hidden = grad_hidden.mul_(grad_loss.to(grad_hidden.dtype))
        grad_weight = grad_weight.mul_(grad_loss).to(ctx.weight_dtype)
        grad_bias = None if grad_bias is None else grad_bias.mul_(grad_loss).to(ctx.bias_dtype)
        return grad_hidden, grad_weight, grad_bias, None, None


def linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    chunk: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, H) states, (V, H) weight, (V,) bias or None, (N,) targets -> (summed cross-entropy of
    ``hidden @ weight.T + bias`` against ``targets``, number of rows whose argmax is the target).

    The same values and gradients as ``F.cross_entropy(F.linear(hidden, weight, bias).float(), targets,
    reduction="sum")``, in O(chunk x V) memory (``chunk`` rows; by default ``chunk_rows(V)``). Without gradients
    (evaluation) it computes no gradient either.
    """
    chunk = chunk or chunk_rows(weight.shape[0])
    if not torch.is_grad_enabled() or not (hidden.requires_grad or weight.requires_grad):
        loss = hidden.new_zeros((), dtype=torch.float32)
        correct = torch.zeros((), dtype=torch.long, device=hidden.device)
        for start in range(0, hidden.shape[0], chunk):
            logits = F.linear(hidden[start : start + chunk], weight, bias).float()
            gold = targets[start : start + chunk]
            loss += F.cross_entropy(logits, gold, reduction="sum")
            correct += (logits.argmax(dim=-1) == gold).sum()
        return loss, correct
    return _LinearCrossEntropy.apply(hidden, weight, bias, targets, chunk)


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
