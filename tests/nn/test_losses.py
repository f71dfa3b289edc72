"""The chunked linear cross-entropy gives plain cross-entropy's loss, argmax count and gradients."""

import pytest
import torch
import torch.nn.functional as F

from plm_toolkit.nn import losses
from plm_toolkit.nn.losses import chunk_rows, linear_cross_entropy
from plm_toolkit.training import compilation


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("chunk", [5, 16, 1000])
@pytest.mark.parametrize("vocab", [101, 601])
@pytest.mark.parametrize("workspace", [True, False])
def test_same_loss_and_gradients_as_plain_cross_entropy(with_bias, chunk, vocab, workspace, monkeypatch):
    """601 entries: three vocabulary blocks of the CPU's forward product; without the workspace: the path of other
    devices (and of torch.compile), on this CPU."""
    if not workspace:
        monkeypatch.setattr(losses, "_buffer", lambda *args: None)
    torch.manual_seed(0)
    hidden = torch.randn(37, 13, requires_grad=True)
    weight = torch.randn(vocab, 13, requires_grad=True)
    bias = torch.randn(vocab, requires_grad=True) if with_bias else None
    targets = torch.randint(0, vocab, (37,))
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


def problem_with_ignored_rows(seed, rows, width, vocab, every):
    """(hidden, weight, bias, targets) with every ``every``-th target ignored (-100)."""
    torch.manual_seed(seed)
    hidden = torch.randn(rows, width, requires_grad=True)
    weight = torch.randn(vocab, width, requires_grad=True)
    bias = torch.randn(vocab, requires_grad=True)
    targets = torch.randint(0, vocab, (rows,))
    targets[::every] = -100
    return hidden, weight, bias, targets


def test_ignored_rows_count_for_nothing_in_loss_hits_and_gradients():
    hidden, weight, bias, targets = problem_with_ignored_rows(1, 29, 11, 67, every=3)
    loss, correct = linear_cross_entropy(hidden, weight, bias, targets, chunk=8, ignore_index=-100)
    loss.backward()
    ours = [p.grad.clone() for p in (hidden, weight, bias)]
    for p in (hidden, weight, bias):
        p.grad = None
    logits = F.linear(hidden, weight, bias)
    reference = F.cross_entropy(logits, targets, reduction="sum", ignore_index=-100)
    reference.backward()
    torch.testing.assert_close(loss, reference, rtol=1e-6, atol=1e-4)
    assert correct.item() == ((logits.argmax(-1) == targets) & (targets != -100)).sum().item()
    assert hidden.grad[::3].abs().max() == 0 and ours[0][::3].abs().max() == 0
    for mine, theirs in zip(ours, (hidden.grad, weight.grad, bias.grad), strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        evaluated, hits = linear_cross_entropy(hidden, weight, bias, targets, chunk=8, ignore_index=-100)
    torch.testing.assert_close(evaluated, reference, rtol=1e-6, atol=1e-4)
    assert hits.item() == correct.item()


def test_large_logits_keep_an_exact_log_partition():
    """log Z from the softmax's largest entry stays exact when the gold logit is far below the top one (its own
    probability underflows to 0 in fp32)."""
    hidden = torch.tensor([[1.0, 0.0], [0.0, 1.0]], requires_grad=True)
    weight = torch.tensor([[200.0, 0.0], [0.0, 0.0], [-200.0, 3.0]], requires_grad=True)
    targets = torch.tensor([2, 1])
    loss, correct = linear_cross_entropy(hidden, weight, None, targets)
    reference = F.cross_entropy(F.linear(hidden, weight), targets, reduction="sum")
    torch.testing.assert_close(loss, reference)
    assert loss.item() > 399 and correct.item() == 0


def test_the_cpu_workspace_serves_calls_of_other_sizes_and_precisions():
    torch.manual_seed(2)
    for rows, vocab in [(50, 300), (7, 1000), (120, 90)]:
        hidden = torch.randn(rows, 16, requires_grad=True)
        weight = torch.randn(vocab, 16, requires_grad=True)
        targets = torch.randint(0, vocab, (rows,))
        loss, _ = linear_cross_entropy(hidden, weight, None, targets, chunk=32)
        torch.testing.assert_close(loss, F.cross_entropy(hidden @ weight.T, targets, reduction="sum"))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _ = linear_cross_entropy(hidden, weight, None, targets, chunk=32)
    loss.backward()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        reference = F.cross_entropy(F.linear(hidden, weight).float(), targets, reduction="sum")
    torch.testing.assert_close(loss, reference, rtol=1e-3, atol=1e-2)
    assert hidden.grad.dtype == torch.float32 and weight.grad.dtype == torch.float32


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


@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16-autocast"])
@pytest.mark.parametrize("with_bias", [True, False])
def test_a_compiled_cpu_step_calls_the_scan_as_one_operator_with_the_eager_values(with_bias, bf16):
    """On a CPU torch.compile calls the chunked scan (vocabulary blocks, workspace) as one operator instead of
    tracing its softmax into generated code; values, hits and gradients stay the eager ones, in autocast's
    precision where the step was traced under it."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    torch._dynamo.reset()
    forward_graphs = []

    def keep(graph_module, _inputs):
        forward_graphs.append(graph_module.graph)
        return make_boxed_func(graph_module.forward)

    backend = aot_autograd(fw_compiler=keep, bw_compiler=lambda gm, _: make_boxed_func(gm.forward))
    hidden, weight, bias, targets = problem_with_ignored_rows(4, 37, 12, 211, every=5)
    bias = bias if with_bias else None
    parameters = [p for p in (hidden, weight, bias) if p is not None]

    def loss_of(h, w, b, t):
        loss, correct = linear_cross_entropy(torch.tanh(h) @ torch.eye(12), w, b, t, chunk=16, ignore_index=-100)
        return loss * 3, correct

    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        compiled_loss, compiled_correct = torch.compile(loss_of, backend=backend)(hidden, weight, bias, targets)
    compiled_loss.backward()
    compiled = [p.grad.clone() for p in parameters]
    for p in parameters:
        p.grad = None
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        eager_loss, eager_correct = loss_of(hidden, weight, bias, targets)
    eager_loss.backward()
    torch._dynamo.reset()
    scan = torch.ops.plm_toolkit.linear_cross_entropy_scan.default
    assert [node.target for graph in forward_graphs for node in graph.nodes].count(scan) == 1
    torch.testing.assert_close(compiled_loss, eager_loss, rtol=1e-6, atol=1e-5)
    assert compiled_correct == eager_correct
    for mine, eager in zip(compiled, [p.grad for p in parameters], strict=True):
        torch.testing.assert_close(mine, eager, rtol=1e-6, atol=1e-6)


@pytest.mark.slow
def test_compiles_into_one_graph_with_the_eager_loss_and_gradients():
    """hardware.compile compiles the objective's loss with the backbone: no graph break."""
    if compilation.compiler_problem(torch.device("cpu")):
        pytest.skip("no working compiler here")
    torch._dynamo.reset()
    hidden, weight, bias, targets = problem_with_ignored_rows(3, 40, 16, 300, every=4)

    def loss_of(h, w, b, t):
        return linear_cross_entropy(torch.tanh(h), w, b, t, chunk=16, ignore_index=-100)[0] * 2

    explained = torch._dynamo.explain(loss_of)(hidden, weight, bias, targets)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    torch.compile(loss_of)(hidden, weight, bias, targets).backward()
    compiled = [p.grad.clone() for p in (hidden, weight, bias)]
    for p in (hidden, weight, bias):
        p.grad = None
    loss_of(hidden, weight, bias, targets).backward()
    for mine, eager in zip(compiled, (hidden.grad, weight.grad, bias.grad), strict=True):
        torch.testing.assert_close(mine, eager, rtol=1e-5, atol=1e-5)
