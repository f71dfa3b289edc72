"""One optimizer step, in its two halves: the gradients of an accumulation window (forward and backward of every
micro-batch: nothing a checkpoint holds changes, so a signal may drop it, training/preemption.py) and the update
(unscale, clip, optimizer and schedule: always finished once begun).

The gradient is that of sum(loss sums) / global target counts of the window, over all micro-batches and processes,
so 8 micro-batches of 4 give the gradient of one batch of 32. A step reads nothing back from the device: its sums
stay device tensors (``StepStats``) until the loop settles them.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from dataclasses import dataclass

import torch
from torch import nn

from plm_toolkit.data.layouts.order import mix_seed
from plm_toolkit.objectives.base import Objective, ObjectiveOutput, normalized_loss
from plm_toolkit.training.compilation import CompileWatch
from plm_toolkit.training.distributed import ProcessInfo
from plm_toolkit.training.flops import ModelFlops
from plm_toolkit.training.precision import LossScaler, Runtime
from plm_toolkit.training.preemption import TrainingClock
from plm_toolkit.training.window import StepStats, Window, reduce_window


class PretrainingModule(nn.Module):
    """Backbone and objective as one module, so DDP, FSDP and the optimizer see every trained parameter."""

    def __init__(self, model: nn.Module, objective: Objective):
        super().__init__()
        self.model = model
        self.objective = objective

    def forward(self, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        return self.objective(self.model, batch)


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


@dataclass
class OptimizerStep:
    """What a step needs, handed over by the Trainer that owns it all."""

    module: nn.Module  # backbone + objective (PretrainingModule): its parameters are trained
    forward: object  # what the forward runs on: the module, its DDP wrapper, or their compiled forward
    ddp: nn.Module | None
    objective: Objective
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    scaler: LossScaler
    clock: TrainingClock
    runtime: Runtime
    flops: ModelFlops
    watch: CompileWatch
    seed: int
    clip_grad_norm: float

    @property
    def process(self) -> ProcessInfo:
        return self.runtime.process

    def gradients(self, micro: list[dict[str, torch.Tensor]], step: int) -> StepStats:
        """Backward over every micro-batch of step ``step`` (1-based); the gradient is that of sum(loss sums) /
        global target counts."""
        local = Window.empty()
        for batch in micro:
            for name, n in self.objective.target_counts(batch).items():
                local.counts[name] += n
        counts = reduce_window(Window(defaultdict(float), local.counts, defaultdict(float)), self.process).counts
        stats = StepStats(step, {}, {}, dict(counts))
        # Dropout and on-device sampling are reseeded per step and rank, so resuming needs no RNG replay.
        torch.manual_seed(mix_seed(self.seed, step - 1, stream=2 + self.process.rank))
        self.module.train()
        self.watch.begin()
        for j, batch in enumerate(micro):
            stats.tokens += float(batch["attention_mask"].sum()) if "attention_mask" in batch else 0.0
            stats.flops += self.flops.of_batch(batch)
            on_device = to_device(batch, self.runtime.device)
            with self._gradient_sync(j == len(micro) - 1):
                with self.runtime.autocast():
                    out = self.forward(on_device)
                # DDP and FSDP average gradients over processes; scaling by world size makes that a sum of
                # per-process sums, each already divided by the global target count.
                loss = normalized_loss(out, counts) * self.process.world_size
                self.scaler.scale(loss).backward()
            for table, values in ((stats.loss_sums, out.loss_sums), (stats.metrics, out.metrics)):
                for k, v in values.items():
                    v = v.detach().float().clone()  # a CUDA-graph replay would overwrite the output in place
                    table[k] = table[k] + v if k in table else v
        self.watch.end(step, micro[0])
        return stats

    def update(self, stats: StepStats) -> StepStats:
        """Unscale, clip, step the optimizer and the schedule, clear the gradients."""
        self.scaler.unscale_(self.optimizer)
        stats.grad_norm = self._clip_gradients()
        self.clock.tick()
        if self.scaler.step(self.optimizer):
            if self.clock.budgeted:  # the schedule runs over the time budget (optim.ScheduleFactor)
                for factor in self.scheduler.lr_lambdas:
                    factor.progress = self.clock.fraction()
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return stats

    def _gradient_sync(self, last: bool):
        """Reduce gradients over processes only after the last micro-batch of the window."""
        if self.ddp is not None and not last:
            return self.ddp.no_sync()
        if self.runtime.fsdp:
            self.module.set_requires_gradient_sync(last)
        return contextlib.nullcontext()

    def _clip_gradients(self) -> torch.Tensor:
        params = [p for p in self.module.parameters() if p.grad is not None]
        max_norm = self.clip_grad_norm if self.clip_grad_norm > 0 else float("inf")
        if not hasattr(torch.nn.utils, "get_total_norm"):  # torch < 2.6 (no FSDP2 there either)
            return torch.nn.utils.clip_grad_norm_(params, max_norm).detach()
        norm = torch.nn.utils.get_total_norm([p.grad for p in params])
        if hasattr(norm, "full_tensor"):  # FSDP: a DTensor of partial sums over the shards
            norm = norm.full_tensor()
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, norm)
        return norm.detach()
