"""Phases of one pretraining run (trainer.phases): each a share of the steps over examples prepared at its own
sequence length and batch size, as BERT trains 90% of its steps at 128 tokens and the rest at 512.

Their batches are read by training/batches.py (``stretches_ahead``), which starts a phase's reader at the phase's
own start.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

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


def blend_metrics(examples, samples: int, last: bool, is_main: bool) -> dict[str, float]:
    """The shares and epochs of a blend's sources (``data.sources``, data/layouts/blend.py) over the ``samples``
    examples read from it so far; logged in words at the ``last`` step."""
    if last and is_main:
        log.info("data.sources over the run: %s", examples.describe(samples))
    return examples.realized(samples)
