"""The loop's evaluation: which validation batches each evaluation scores, their loss sums, target counts and
metrics summed over all processes (each ``data.sources`` source alone too), and the objective's own decoding of the
gathered outputs (``Objective.finish_evaluation``). Each function takes the ``Trainer`` (training/loop.py)."""

from __future__ import annotations

import logging
import time
from collections import defaultdict

import torch

from plm_toolkit.data.batching.loader import eval_loader, eval_scope
from plm_toolkit.objectives.base import Objective
from plm_toolkit.training.batches import rows_per_batch
from plm_toolkit.training.distributed import all_gather_objects, in_lockstep
from plm_toolkit.training.logging import ProgressBar
from plm_toolkit.training.window import Window, eval_summary, merged_windows, reduce_window

log = logging.getLogger("plm_toolkit")


def evaluates(trainer) -> bool:
    """Whether the run evaluates during training: it has validation data and trainer.eval_every or
    trainer.eval_strategy=epoch."""
    by_epoch = trainer.cfg.get("eval_strategy", "steps") == "epoch"
    return trainer.eval_examples is not None and (by_epoch or bool(trainer.cfg.eval_every))


def evaluates_at_end(trainer) -> bool:
    """Whether the run evaluates when training ends: it has validation data and trainer.eval_at_end, whatever
    trainer.eval_every says."""
    return trainer.eval_examples is not None and bool(trainer.cfg.get("eval_at_end", True))


def log_eval_scope(trainer) -> None:
    """Which validation batches every evaluation scores (a fixed sample, or all of them)."""
    if trainer.process.is_main:
        rows = rows_per_batch(trainer.eval_examples, trainer.cfg)
        world, streams = trainer.process.world_size, trainer.plan.streams
        for name, part in (getattr(trainer.eval_examples, "sources", None) or {"": trainer.eval_examples}).items():
            scope = eval_scope(len(part), rows, world, trainer.cfg.eval_batches, streams)
            log.info(f"{name}: {scope}" if name else scope)  # data.sources: each source's own sample


@torch.no_grad()
def evaluate_weights(trainer, bar: ProgressBar | None = None, write: bool = True) -> dict:
    """Evaluate the trainer's current weights; ``write=False`` keeps the record out of metrics.jsonl and the
    trackers."""
    if trainer.eval_examples is None:
        return {}
    trainer.module.eval()
    objective = trainer.objective
    outputs: dict[str, list[torch.Tensor]] = defaultdict(list)
    # data.sources: each source's validation examples are scored alone (eval_loss/<name>), the overall is their sum.
    parts = getattr(trainer.eval_examples, "sources", None) or {"": trainer.eval_examples}
    windows = {name: _eval_window(trainer, examples, outputs) for name, examples in parts.items()}
    summary = eval_summary(merged_windows(windows.values()), objective)
    for name, window in windows.items() if parts.get("") is None else ():
        summary.update({f"{key}/{name}": value for key, value in eval_summary(window, objective).items()})
    if type(objective).finish_evaluation is not Objective.finish_evaluation:
        # Every process holds the rows of its own batches; tasks decode from all of them.
        gathered = all_gather_objects({k: torch.cat(v) for k, v in outputs.items()}, trainer.process)
        keys = sorted({k for part in gathered for k in part})
        merged = {k: torch.cat([part[k] for part in gathered if k in part]) for k in keys}
        summary.update({f"eval_{k}": v for k, v in objective.finish_evaluation(merged).items()})
    record = {"step": trainer.step, **summary}
    if write:
        trainer.metrics.write(record)
    if bar is not None and trainer.process.is_main:
        bar.write(" ".join(f"{k}={v:.4g}" for k, v in record.items()))
    trainer.module.train()
    trainer.tick = time.perf_counter()  # evaluation time stays out of the training throughput
    return record


def _eval_window(trainer, examples, outputs: dict[str, list[torch.Tensor]]) -> Window:
    """Loss sums, target counts and metrics of ``examples``' validation batches, over all processes."""
    window = Window.empty()
    process, runtime = trainer.process, trainer.runtime
    batches = eval_batches(trainer, process.world_size, process.rank, trainer.cfg.eval_batches, examples)
    for batch, real in in_lockstep(batches, process, lambda: next(iter(eval_batches(trainer, 1, 0, 1, examples)))):
        counts = trainer.objective.target_counts(batch)
        batch = {k: v.to(runtime.device) for k, v in batch.items()}
        with runtime.autocast():
            out = trainer.module(batch)
        # A repeated batch adds its keys, not its numbers: every process then sums the same keys.
        for table, values in ((window.counts, counts), (window.loss_sums, out.loss_sums)):
            for k, v in values.items():
                table[k] += float(v) if real else 0.0
        for k, v in out.metrics.items():
            window.metrics[k] += float(v) if real else 0.0
        for k, v in out.outputs.items() if real else ():
            outputs[k].append(v.detach().float().cpu() if v.is_floating_point() else v.detach().cpu())
    return reduce_window(window, process)


def eval_batches(trainer, world: int, rank: int, max_batches: int, examples=None):
    """The validation batches process ``rank`` of ``world`` scores (``max_batches`` as trainer.eval_batches), of
    ``examples`` or else of the trainer's validation examples."""
    examples = trainer.eval_examples if examples is None else examples
    return eval_loader(
        examples,
        rows_per_batch(examples, trainer.cfg),
        world,
        rank,
        trainer.collate,
        trainer.transform,
        trainer.cfg.seed,
        max_batches,
        streams=trainer.plan.streams,
        backward_half=trainer.plan.backward_half,
    )
