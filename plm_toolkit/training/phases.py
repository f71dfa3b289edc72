"""Phases of one pretraining run (trainer.phases): each a share of the steps over examples prepared at its own
sequence length and batch size, as BERT trains 90% of its steps at 128 tokens and the rest at 512.

A phase reads its examples from its own start: micro-batch k of a phase is a pure function of (seed, k), so a run
resumed at step s inside phase p starts that phase's reader at (s - start of p) global batches, where the run that
was not interrupted is at that step.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from plm_toolkit.data.batching.loader import BatchLayout, MicroBatches, micro_batch_loader
from plm_toolkit.data.layouts.examples import PretrainingData
from plm_toolkit.training.batches import Batching

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


@dataclass(frozen=True)
class PhaseStart:
    """The reader enters a phase: the Trainer's examples and batch layout become the phase's (so that evaluation
    and the examples counted follow it), then ``batches`` are the phase's micro-batches."""

    phase: TrainingPhase
    layout: BatchLayout
    batches: Iterable[Any]


def phase_readers(
    phases: list[TrainingPhase], batching: Batching, layout: BatchLayout, step: int
) -> Iterator[PhaseStart]:
    """The micro-batches of the phases still ahead of step ``step``, phase after phase, each phase's built as it
    begins."""
    for phase in phases:
        if phase.end <= step:
            continue
        done = max(step - phase.start, 0)  # steps of this phase already taken (a run resumed inside it)
        layout = dataclasses.replace(layout, batch_size=phase.batch_size)
        micro = MicroBatches(
            phase.data.train,
            layout,
            done * layout.global_batch,
            batching.collate,
            batching.transform,
            batching.seed,
            static_copies=batching.plan.static_copies,
            first_step=phase.start + done if batching.takes_step else None,
            shapes=batching.shapes.capped(phase.max_seq_len) if batching.shapes else None,
        )
        stop = (phase.end - phase.start - done) * layout.grad_accum_steps
        batches = micro_batch_loader(micro, batching.num_workers, stop=stop, pin_memory=batching.pin_memory)
        yield PhaseStart(phase, layout, batches)


def blend_metrics(examples, samples: int, last: bool, is_main: bool) -> dict[str, float]:
    """The shares and epochs of a blend's sources (``data.sources``, data/layouts/blend.py) over the ``samples``
    examples read from it so far; logged in words at the ``last`` step."""
    if last and is_main:
        log.info("data.sources over the run: %s", examples.describe(samples))
    return examples.realized(samples)
