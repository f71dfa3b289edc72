"""Cross-entropy through a vocabulary projection without materializing all the logits.

A causal LM predicts at every position: N = batch x length rows of a (N, V) logit matrix, 1.6 GB in fp32 for 8 x 1024
tokens of GPT-2's 50,257 entries, plus as much again for its softmax and its gradient. ``linear_cross_entropy``
walks the rows in chunks: each chunk's logits give its loss and, straight away, their gradient (softmax minus the
one-hot target), which is folded into the gradients of the hidden states and of the weight before the next chunk;
backward then only scales those by the incoming gradient. Peak memory is one chunk's logits, and the projection
costs the same three matmuls as the plain form (forward, and the two of its backward). Written here because torch
has no fused linear + cross-entropy; the idea is that of Liger-Kernel's FusedLinearCrossEntropy and of
Wijmans et al. 2024 ("Cut Your Losses in Large-Vocabulary Language Models"). The causal LMs' ``clm``, T5's span
corruption, the biLM and MLM's masked positions all go through it.

What a step costs besides the matmuls is passes over the (chunk, V) buffer, so there are few: one max, torch's
softmax kernel (one read, one write a row), one max of the softmax (log Z = max - log max softmax), the one-hot
subtraction in place. On a CPU the buffers are kept between steps (fresh ones cost their size in page faults) and
the forward product is written in vocabulary blocks (``_chunk_logits``): GPT-2 small's step went from 1.06x to
1.38x ``GPT2LMHeadModel``'s speed, BERT-Tiny MLM's from 4.1x to 5.9x ``BertForMaskedLM``'s
(docs/speed-and-benchmarks.md).

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
# Vocabulary columns per matmul of the forward projection on a CPU (see ``_chunk_logits``).
CPU_VOCAB_BLOCK = 256

# CPU only: a chunk's logits and softmax live in buffers kept between calls. A fresh 200 MB tensor costs ~100 ms of
# page faults on every allocation (glibc hands large blocks back to the kernel when they are freed), as much as the
# softmax itself; CUDA's caching allocator already reuses its blocks.
_CPU_WORKSPACE: dict[tuple[str, torch.dtype], torch.Tensor] = {}


def chunk_rows(vocab_size: int) -> int:
    return max(1024, CHUNK_ELEMENTS // max(vocab_size, 1))


def _buffer(slot: str, rows: int, vocab: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor | None:
    """A (rows, vocab) view of CPU workspace ``slot``, grown as needed; None off the CPU and under torch.compile
    (which plans its own buffers)."""
    if device.type != "cpu" or torch.compiler.is_compiling():
        return None
    buffer = _CPU_WORKSPACE.get((slot, dtype))
    if buffer is None or buffer.numel() < rows * vocab:
        buffer = _CPU_WORKSPACE[slot, dtype] = torch.empty(rows * vocab, dtype=dtype)
    return buffer[: rows * vocab].view(rows, vocab)


def _compute_dtype(tensor: torch.Tensor) -> torch.dtype:
    """The matmuls' dtype: autocast's where it is on for the tensor's device, else the tensor's own."""
    kind = tensor.device.type
    return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else tensor.dtype


def _chunk_logits(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """(C, H) states and (V, H) weight, both in the compute dtype -> (C, V) logits in that dtype.

    On a CPU the product is written in blocks of ``CPU_VOCAB_BLOCK`` vocabulary columns: MKL's single (C, V) call
    runs at 58-73 GFLOP/s on one core of the 2-core box against 77-93 in blocks (1024 x 768 by 50,257 and
    1024 x 128; ``scripts`` figures in docs/speed-and-benchmarks.md), the backward products already at 85-100.
    """
    out = _buffer("logits", h.shape[0], weight.shape[0], h.dtype, h.device)
    if out is None:
        logits = h @ weight.t()
    else:
        for start in range(0, weight.shape[0], CPU_VOCAB_BLOCK):
            block = slice(start, start + CPU_VOCAB_BLOCK)
            torch.mm(h, weight[block].t(), out=out[:, block])
        logits = out
    return logits.add_(bias.to(h.dtype)) if bias is not None else logits


def _softmax(logits: torch.Tensor) -> torch.Tensor:
    """(C, V) -> fp32 softmax over V: torch's one-pass-per-row kernel, into the CPU workspace for fp32 logits."""
    out = _buffer("softmax", *logits.shape, torch.float32, logits.device)
    if out is None or logits.dtype != torch.float32:
        return torch.softmax(logits, dim=-1, dtype=torch.float32)
    return torch.ops.aten._softmax.out(logits, -1, False, out=out)


def _chunk_loss(
    logits: torch.Tensor, gold: torch.Tensor, valid: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(C, V) logits, (C,) targets, (C,) bool rows that count or None for all -> (summed cross-entropy, argmax hits,
    (C, V) fp32 softmax).

    log Z comes from the softmax itself: its largest entry is exp(0) / Z, so the loss of a row is
    max - log(max softmax) - logit(gold), as exact as torch.logsumexp and with no pass over the row of its own.
    """
    top = logits.amax(dim=-1).float()  # (C,)
    gold_logits = logits.gather(-1, gold[:, None])[:, 0].float()  # (C,)
    hits = gold_logits >= top  # the target is (one of) the largest
    probs = _softmax(logits)
    losses = top - probs.amax(dim=-1).log() - gold_logits  # (C,)
    if valid is not None:
        hits, losses = hits & valid, losses * valid
    return losses.sum(), hits.sum(), probs


def _valid_rows(targets: torch.Tensor, ignore_index: int | None) -> tuple[torch.Tensor | None, torch.Tensor]:
    """(rows that count, or None when all do; targets with the ignored ones replaced by a valid id)."""
    if ignore_index is None:
        return None, targets
    valid = targets != ignore_index
    return valid, targets.masked_fill(~valid, 0)


def _scan(hidden, weight, bias, targets, chunk, ignore_index, gradients: bool, compute: torch.dtype | None = None):
    """The chunks' summed loss and hits, and with ``gradients`` the loss's gradients with respect to ``hidden``
    (``compute`` dtype: by default autocast's or the weight's), ``weight`` and ``bias`` (fp32), folded in chunk by
    chunk; otherwise None for each."""
    compute = compute or _compute_dtype(weight)
    valid, targets = _valid_rows(targets, ignore_index)
    weight_c, hidden_c = weight.to(compute), hidden.to(compute)
    loss = hidden.new_zeros((), dtype=torch.float32)
    correct = torch.zeros((), dtype=torch.long, device=hidden.device)
    grad_hidden = torch.empty_like(hidden_c) if gradients else None
    grad_weight = None  # (V, H) fp32, started by the first chunk's matmul (no zero fill)
    grad_bias = torch.zeros_like(bias, dtype=torch.float32) if gradients and bias is not None else None
    with torch.autocast(hidden.device.type, enabled=False):
        for start in range(0, hidden.shape[0], chunk):
            rows = slice(start, start + chunk)
            h, gold = hidden_c[rows], targets[rows]  # (C, H), (C,)
            kept = None if valid is None else valid[rows]
            logits = _chunk_logits(h, weight_c, bias)  # (C, V)
            chunk_loss, chunk_correct, probs = _chunk_loss(logits, gold, kept)
            loss += chunk_loss
            correct += chunk_correct
            if not gradients:
                continue
            # d loss / d logits = softmax - one-hot, then in the forward's precision for the matmuls (over the
            # logits' buffer, no longer needed, where that is the compute dtype's).
            probs[torch.arange(gold.shape[0], device=gold.device), gold] -= 1.0
            if kept is not None:
                probs.mul_(kept[:, None])  # ignored rows: no gradient
            grad_logits = probs if compute == torch.float32 else logits.copy_(probs)  # (C, V)
            grad_hidden[rows] = grad_logits @ weight_c  # (C, H)
            if grad_weight is None:
                grad_weight = (grad_logits.T @ h).float()  # (V, H)
            elif compute == grad_weight.dtype:
                grad_weight.addmm_(grad_logits.T, h)  # accumulated in place
            else:
                grad_weight += (grad_logits.T @ h).float()
            if grad_bias is not None:
                grad_bias += probs.sum(dim=0)
    if gradients and grad_weight is None:  # no rows at all
        grad_weight = torch.zeros_like(weight, dtype=torch.float32)
    return loss, correct, grad_hidden, grad_weight, grad_bias


@torch.library.custom_op("plm_toolkit::linear_cross_entropy_scan", mutates_args=())
def _opaque_scan(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    chunk: int,
    ignore_index: int | None,
    compute: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``_scan`` with gradients as one operator torch.compile calls rather than traces (a compiled step): it
    runs eagerly, with its vocabulary blocks and workspace (BERT-Tiny's compiled CPU step: 193 ms a step with the
    scan traced, 157 ms calling it; docs/speed-and-benchmarks.md). ``compute``: the matmuls' dtype where the step
    was traced (autocast's there); no bias: an empty bias gradient."""
    loss, correct, grad_hidden, grad_weight, grad_bias = _scan(
        hidden, weight, bias, targets, chunk, ignore_index, gradients=True, compute=compute
    )
    return loss, correct, grad_hidden, grad_weight, grad_bias if grad_bias is not None else weight.new_empty(0)


@_opaque_scan.register_fake
def _(hidden, weight, bias, targets, chunk, ignore_index, compute):
    return (
        hidden.new_empty((), dtype=torch.float32),
        hidden.new_empty((), dtype=torch.long),
        hidden.new_empty(hidden.shape, dtype=compute),
        weight.new_empty(weight.shape, dtype=torch.float32),
        weight.new_empty(0) if bias is None else bias.new_empty(bias.shape, dtype=torch.float32),
    )


def _scan_with_gradients(hidden, weight, bias, targets, chunk, ignore_index):
    # A compiled step calls the scan's operator on every device. Traced, inductor's CUDA code for it (H200, torch
    # 2.11) gave every parameter below the output layer a zero gradient: compiled bert_base and gpt2_small runs kept
    # their first loss for 30 steps (tests/training/test_compiled_gradients.py checks each gradient).
    if torch.compiler.is_compiling():
        loss, correct, grad_hidden, grad_weight, grad_bias = _opaque_scan(
            hidden, weight, bias, targets, chunk, ignore_index, _compute_dtype(weight)
        )
        return loss, correct, grad_hidden, grad_weight, None if bias is None else grad_bias
    return _scan(hidden, weight, bias, targets, chunk, ignore_index, gradients=True)


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, chunk, ignore_index):
        loss, correct, *grads = _scan_with_gradients(hidden, weight, bias, targets, chunk, ignore_index)
        ctx.save_for_backward(*grads)
        ctx.hidden_dtype, ctx.weight_dtype = hidden.dtype, weight.dtype
        ctx.bias_dtype = None if bias is None else bias.dtype
        ctx.mark_non_differentiable(correct)
        return loss, correct

    @staticmethod
    def backward(ctx, grad_loss, _grad_correct):
        grad_hidden, grad_weight, grad_bias = ctx.saved_tensors
        if torch.compiler.is_compiling():  # a traced backward may not write to its saved tensors
            grad_hidden, grad_weight = grad_hidden.clone(), grad_weight.clone()
            grad_bias = None if grad_bias is None else grad_bias.clone()
        # In place: the saved gradients are used once (the (V, H) one is as large as the embedding).
        grad_hidden = grad_hidden.mul_(grad_loss.to(grad_hidden.dtype)).to(ctx.hidden_dtype)
        grad_weight = grad_weight.mul_(grad_loss).to(ctx.weight_dtype)
        grad_bias = None if grad_bias is None else grad_bias.mul_(grad_loss).to(ctx.bias_dtype)
        return grad_hidden, grad_weight, grad_bias, None, None, None


def linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    chunk: int | None = None,
    ignore_index: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, H) states, (V, H) weight, (V,) bias or None, (N,) targets -> (summed cross-entropy of
    ``hidden @ weight.T + bias`` against ``targets``, number of rows whose largest logit is the target's).

    The same values and gradients as ``F.cross_entropy(F.linear(hidden, weight, bias).float(), targets,
    reduction="sum", ignore_index=...)``, in O(chunk x V) memory (``chunk`` rows; by default ``chunk_rows(V)``).
    Rows whose target is ``ignore_index`` count for nothing. Without gradients (evaluation) it computes no
    gradient either.
    """
    chunk = chunk or chunk_rows(weight.shape[0])
    if torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad):
        return _LinearCrossEntropy.apply(hidden, weight, bias, targets, chunk, ignore_index)
    loss, correct, *_ = _scan(hidden, weight, bias, targets, chunk, ignore_index, gradients=False)
    return loss, correct


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
