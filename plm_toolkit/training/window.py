"""What the loop sums between log lines, and how a step's sums leave the device.

A training step keeps its loss sums, metrics and gradient norm as device tensors (``StepStats``): reading one would
make the host wait for the device every step. ``settle`` copies a batch of pending steps to the host in one
transfer (at log and save points) and sums them over processes in one all-reduce.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import torch

from plm_toolkit.training.distributed import all_reduce_sum


@dataclass
class Window:
    """Sums over optimizer steps since the last log line, already reduced over processes."""

    loss_sums: dict[str, float]
    counts: dict[str, float]
    metrics: dict[str, float]
    tokens: float = 0.0
    steps: int = 0
    flops: float = 0.0
    grad_norm: float = 0.0

    @classmethod
    def empty(cls) -> Window:
        return cls(defaultdict(float), defaultdict(float), defaultdict(float))

    def add(self, other: Window) -> None:
        for mine, theirs in (
            (self.loss_sums, other.loss_sums),
            (self.counts, other.counts),
            (self.metrics, other.metrics),
        ):
            for k, v in theirs.items():
                mine[k] += v
        self.tokens += other.tokens
        self.steps += other.steps
        self.flops += other.flops
        self.grad_norm += other.grad_norm

    def loss(self) -> float:
        return sum(v / max(self.counts[k], 1.0) for k, v in self.loss_sums.items())

    def summary(self, denominators: dict[str, str], prefix: str = "", components: bool = False) -> dict[str, float]:
        out = {f"{prefix}loss": self.loss()}
        if components or len(self.loss_sums) > 1:
            out.update({f"{prefix}{k}_loss": v / max(self.counts[k], 1.0) for k, v in self.loss_sums.items()})
        for name, value in self.metrics.items():
            component = denominators.get(name)
            label = name.removesuffix("_correct") + "_accuracy" if name.endswith("_correct") else name
            out[f"{prefix}{label}"] = value / max(self.counts[component], 1.0) if component else value
        return out


def merged_windows(windows) -> Window:
    """The sums of several windows (the validation sources of a blend, scored one by one)."""
    out = Window.empty()
    for window in windows:
        out.add(window)
    return out


def eval_summary(window: Window, objective) -> dict[str, float]:
    """An evaluation's metrics (``eval_loss``, each component's loss, accuracy and perplexity) from its window."""
    summary = window.summary(objective.metric_denominators, prefix="eval_", components=True)
    for name in objective.perplexity_components:
        if f"eval_{name}_loss" in summary:
            summary[f"eval_{name}_perplexity"] = math.exp(min(summary[f"eval_{name}_loss"], 50.0))
    return summary


def reduce_window(window: Window, process) -> Window:
    """Sum a window's numbers over all processes with one all-reduce."""
    keys = [("l", k) for k in sorted(window.loss_sums)] + [("c", k) for k in sorted(window.counts)]
    keys += [("m", k) for k in sorted(window.metrics)]
    tables = {"l": window.loss_sums, "c": window.counts, "m": window.metrics}
    values = torch.tensor([tables[t][k] for t, k in keys] + [window.tokens, window.flops], dtype=torch.float64)
    values = all_reduce_sum(values, process).tolist()
    out = Window.empty()
    for (t, k), v in zip(keys, values[:-2], strict=True):
        {"l": out.loss_sums, "c": out.counts, "m": out.metrics}[t][k] = v
    out.tokens, out.flops, out.steps, out.grad_norm = values[-2], values[-1], window.steps, window.grad_norm
    return out


@dataclass
class StepStats:
    """One optimizer step before it is read: this process's loss sums and metrics as device tensors, the global
    target counts (known on the host from the CPU batches), and this process's tokens and model FLOPs."""

    step: int
    loss_sums: dict[str, torch.Tensor]
    metrics: dict[str, torch.Tensor]
    counts: dict[str, float]
    tokens: float = 0.0
    flops: float = 0.0
    grad_norm: torch.Tensor | float = field(default=0.0)

    def loss(self) -> float:
        """This process's normalised loss (reads the device)."""
        return sum(float(v) / max(self.counts[k], 1.0) for k, v in self.loss_sums.items())


def settle(pending: list[StepStats], process) -> tuple[Window, list[tuple[int, float]]]:
    """The window of ``pending`` steps, summed over processes, and each step's (step, global loss)."""
    if not pending:
        return Window.empty(), []
    loss_keys = sorted({k for s in pending for k in s.loss_sums})
    metric_keys = sorted({k for s in pending for k in s.metrics})
    zero = torch.zeros(())
    device_rows = []
    for s in pending:
        values = [s.loss_sums.get(k, zero) for k in loss_keys] + [s.metrics.get(k, zero) for k in metric_keys]
        values.append(s.grad_norm if torch.is_tensor(s.grad_norm) else torch.tensor(float(s.grad_norm)))
        device = next((v.device for v in values if torch.is_tensor(v) and v.device.type != "cpu"), None)
        device_rows.append(torch.stack([torch.as_tensor(v, device=device).detach().double() for v in values]))
    device = device_rows[0].device
    table = torch.stack([row.to(device) for row in device_rows]).cpu()  # (S, F): the one wait for the device
    host = torch.tensor([[s.tokens, s.flops] for s in pending], dtype=torch.float64)  # (S, 2)
    summed = all_reduce_sum(torch.cat([table[:, :-1], host], dim=1), process)  # grad norms are already global
    window = Window.empty()
    losses = []
    for i, s in enumerate(pending):
        row = summed[i].tolist()
        step_loss = 0.0
        for j, k in enumerate(loss_keys):
            window.loss_sums[k] += row[j]
            step_loss += row[j] / max(s.counts.get(k, 0.0), 1.0)
        for j, k in enumerate(metric_keys):
            window.metrics[k] += row[len(loss_keys) + j]
        for k, n in s.counts.items():
            window.counts[k] += n
        window.tokens += row[-2]
        window.flops += row[-1]
        window.grad_norm += float(table[i, -1])
        window.steps += 1
        losses.append((s.step, step_loss))
    return window, losses
