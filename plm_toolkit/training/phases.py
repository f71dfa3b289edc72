"""Phases of one pretraining run (trainer.phases): each a share of the steps over examples prepared at its own
sequence length and batch size, as BERT trains 90% of its steps at 128 tokens and the rest at 512.

A phase reads its examples from its own start: micro-batch k of a phase is a pure function of (seed, k), so a run
resumed at step s inside phase p starts that phase's reader at (s - start of p) global batches, where the run that
was not interrupted is at that step.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from plm_toolkit.data.batching.loader import MicroBatches, micro_batch_loader
from plm_toolkit.data.layouts.examples import PretrainingData

log = logging.getLogger("plm_toolkit")


@dataclass
class TrainingPhase:
    # Optimizer steps before the phase begins and when it ends (end exclusive: steps start + 1 .. end).
    start: int
    end: int
    # Sequences per micro-batch.
    batch_size: int
    data: PretrainingData
    # Tokens per sequence (the phase's data.max_seq_len).
    max_seq_len: int | None = None


def phase_bounds(fractions: list[float], max_steps: int) -> list[tuple[int, int]]:
    """(start, end) step of each phase: the shares' running sums times max_steps, rounded; the last ends at
    max_steps."""
    ends, total = [], 0.0
    for fraction in fractions:
        total += fraction
        ends.append(round(total * max_steps))
    ends[-1] = max_steps
    return list(zip([0, *ends[:-1]], ends, strict=True))


def training_phases(trainer_cfg: Any, phase_data: list[PretrainingData]) -> list[TrainingPhase]:
    """The phases of ``trainer.phases`` with their steps and batch sizes, over each phase's examples (``phase_data``,
    built by the data entry point at each phase's data.max_seq_len)."""
    phases = trainer_cfg.phases
    bounds = phase_bounds([p.fraction for p in phases], int(trainer_cfg.max_steps))
    return [
        TrainingPhase(start, end, phase.batch_size or trainer_cfg.batch_size, data, int(phase.max_seq_len))
        for phase, (start, end), data in zip(phases, bounds, phase_data, strict=True)
    ]


def phase_at(phases: list[TrainingPhase], step: int) -> tuple[int, TrainingPhase]:
    """(1-based number, phase) of the phase that step ``step`` (1-based) belongs to; step 0 is the first's."""
    for number, phase in enumerate(phases, start=1):
        if step <= phase.end:
            return number, phase
    return len(phases), phases[-1]


def phased_micro_batches(trainer, pin_memory: bool) -> Iterator[Any]:
    """The trainer's micro-batches phase after phase, from the step it is at. Entering a phase switches the
    trainer's examples and batch layout to the phase's (so evaluation and the examples counted follow it)."""
    accum = trainer.layout.grad_accum_steps
    for phase in trainer.phases:
        if phase.end <= trainer.step:
            continue
        done = max(trainer.step - phase.start, 0)
        trainer.layout = dataclasses.replace(trainer.layout, batch_size=phase.batch_size)
        trainer.train_examples, trainer.eval_examples = phase.data.train, phase.data.validation
        micro = MicroBatches(
            phase.data.train,
            trainer.layout,
            done * trainer.layout.global_batch,
            trainer.collate,
            trainer.transform,
            trainer.cfg.seed,
            static_copies=trainer.plan.static_copies,
            first_step=phase.start + done if getattr(trainer.transform, "takes_step", False) else None,
            shapes=trainer.shapes.capped(phase.max_seq_len) if trainer.shapes else None,
        )
        stop = (phase.end - phase.start - done) * accum
        yield from micro_batch_loader(micro, trainer.num_workers, stop=stop, pin_memory=pin_memory)


def blend_metrics(trainer) -> dict[str, float]:
    """The shares and epochs of a blend's sources (``data.sources``, data/layouts/blend.py) over the examples read from
    it so far (the current phase's, with trainer.phases); logged in words at the last step."""
    samples = trainer.samples_seen
    if trainer.phases:
        _, phase = phase_at(trainer.phases, trainer.step)
        samples = (trainer.step - phase.start) * trainer.layout.global_batch
    if trainer.step == trainer.max_steps and trainer.process.is_main:
        log.info("data.sources over the run: %s", trainer.train_examples.describe(samples))
    return trainer.train_examples.realized(samples)
