"""The loop's evaluation: which validation batches each evaluation scores, their loss sums, target counts and
metrics summed over all processes (each ``data.sources`` source alone too), and the objective's own decoding of the
gathered outputs (``Objective.finish_evaluation``). The ``Evaluator`` scores the weights of the module it was built
with and returns the record; the Trainer (training/loop.py) writes it."""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass

import torch
from torch import nn

from plm_toolkit.core.schema import TrainerConfig
from plm_toolkit.data.batching.loader import eval_loader, eval_scope
from plm_toolkit.objectives.base import Objective
from plm_toolkit.training.batches import Batching
from plm_toolkit.training.distributed import all_gather_objects, in_lockstep
from plm_toolkit.training.precision import Runtime
from plm_toolkit.training.window import Window, eval_summary, merged_windows, reduce_window

log = logging.getLogger("plm_toolkit")


@dataclass(frozen=True)
class EvaluationSchedule:
    """When the run evaluates, decided once from the config and whether it has validation examples: during
    training (every trainer.eval_every steps, or with trainer.eval_strategy=epoch at the step that completes an
    epoch), and when training ends (trainer.eval_at_end, whatever trainer.eval_every says)."""

    by_epoch: bool
    every: int
    # Whether the run evaluates during training, and when it ends.
    during: bool
    at_end: bool

    @classmethod
    def from_config(cls, trainer_cfg: TrainerConfig, has_validation: bool) -> EvaluationSchedule:
        by_epoch = trainer_cfg.get("eval_strategy", "steps") == "epoch"
        every = int(trainer_cfg.eval_every or 0)
        at_end = has_validation and bool(trainer_cfg.get("eval_at_end", True))
        return cls(by_epoch, every, has_validation and (by_epoch or every > 0), at_end)

    def due(self, step: int, last_step: int, examples: int, global_batch: int) -> bool:
        """Whether ``step``, before the ``last_step``, evaluates: a multiple of trainer.eval_every, or (by epoch) the
        step that completes an epoch of the ``examples``."""
        if not self.during or step == last_step:
            return False
        if self.by_epoch:
            return step * global_batch // examples > (step - 1) * global_batch // examples
        return step % self.every == 0


def sources(examples) -> dict:
    """A blend's validation examples by source (``data.sources``), or {"": examples}."""
    return getattr(examples, "sources", None) or {"": examples}


@dataclass(frozen=True)
class Evaluator:
    """Scores the module's weights on validation examples; of what it is given, it changes only the module's
    train/eval mode, which it puts back."""

    module: nn.Module  # backbone + objective (PretrainingModule)
    objective: Objective
    runtime: Runtime
    batching: Batching
    # Items per validation batch: trainer.batch_size examples, or one where they come in ready-made batches.
    rows: int
    # trainer.eval_batches: the batches an evaluation scores (0: all).
    max_batches: int

    def log_scope(self, examples) -> None:
        """Which validation batches every evaluation scores (a fixed sample, or all of them)."""
        process = self.runtime.process
        if process.is_main:
            streams = self.batching.plan.streams
            for name, part in sources(examples).items():
                scope = eval_scope(len(part), self.rows, process.world_size, self.max_batches, streams)
                log.info(f"{name}: {scope}" if name else scope)  # data.sources: each source's own sample

    def batches(self, examples, world: int, rank: int, max_batches: int):
        """The validation batches of ``examples`` that process ``rank`` of ``world`` scores (``max_batches`` as
        trainer.eval_batches)."""
        return eval_loader(
            examples,
            self.rows,
            world,
            rank,
            self.batching.collate,
            self.batching.transform,
            self.batching.seed,
            max_batches,
            streams=self.batching.plan.streams,
            backward_half=self.batching.plan.backward_half,
        )

    @torch.no_grad()
    def evaluate(self, examples, step: int) -> dict:
        """The evaluation record of the module's current weights on ``examples`` at step ``step``."""
        self.module.eval()
        objective = self.objective
        outputs: dict[str, list[torch.Tensor]] = defaultdict(list)
        # data.sources: each source's validation examples are scored alone (eval_loss/<name>), the overall is their
        # sum.
        parts = sources(examples)
        windows = {name: self._window(part, outputs) for name, part in parts.items()}
        summary = eval_summary(merged_windows(windows.values()), objective)
        for name, window in windows.items() if parts.get("") is None else ():
            summary.update({f"{key}/{name}": value for key, value in eval_summary(window, objective).items()})
        if type(objective).finish_evaluation is not Objective.finish_evaluation:
            # Every process holds the rows of its own batches; tasks decode from all of them.
            gathered = all_gather_objects({k: torch.cat(v) for k, v in outputs.items()}, self.runtime.process)
            keys = sorted({k for part in gathered for k in part})
            merged = {k: torch.cat([part[k] for part in gathered if k in part]) for k in keys}
            summary.update({f"eval_{k}": v for k, v in objective.finish_evaluation(merged).items()})
        self.module.train()
        return {"step": step, **summary}

    def _window(self, examples, outputs: dict[str, list[torch.Tensor]]) -> Window:
        """Loss sums, target counts and metrics of ``examples``' validation batches, over all processes."""
        window = Window.empty()
        process, runtime = self.runtime.process, self.runtime
        batches = self.batches(examples, process.world_size, process.rank, self.max_batches)
        for batch, real in in_lockstep(batches, process, lambda: next(iter(self.batches(examples, 1, 0, 1)))):
            counts = self.objective.target_counts(batch)
            batch = {k: v.to(runtime.device) for k, v in batch.items()}
            with runtime.autocast():
                out = self.module(batch)
            # A repeated batch adds its keys, not its numbers: every process then sums the same keys.
            for table, values in ((window.counts, counts), (window.loss_sums, out.loss_sums)):
                for k, v in values.items():
                    table[k] += float(v) if real else 0.0
            for k, v in out.metrics.items():
                window.metrics[k] += float(v) if real else 0.0
            for k, v in out.outputs.items() if real else ():
                outputs[k].append(v.detach().float().cpu() if v.is_floating_point() else v.detach().cpu())
        return reduce_window(window, process)
