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

from omegaconf import OmegaConf

from plm_toolkit.config.resolve import resolve_run
from plm_toolkit.data.batching.loader import MicroBatches, micro_batch_loader
from plm_toolkit.data.build import PretrainingData, prepare_pretraining_data

log = logging.getLogger("plm_toolkit")


@dataclass
class TrainingPhase:
    # Optimizer steps before the phase begins and when it ends (end exclusive: steps start + 1 .. end).
    start: int
    end: int
    # Sequences per micro-batch.
    batch_size: int
    data: PretrainingData


def phase_bounds(fractions: list[float], max_steps: int) -> list[tuple[int, int]]:
    """(start, end) step of each phase: the shares' running sums times max_steps, rounded; the last ends at
    max_steps."""
    ends, total = [], 0.0
    for fraction in fractions:
        total += fraction
        ends.append(round(total * max_steps))
    ends[-1] = max_steps
    return list(zip([0, *ends[:-1]], ends, strict=True))


def prepare_phases(cfg, data_cfg, seed: int, with_sources=lambda plan: plan) -> list[TrainingPhase]:
    """Each phase's examples, prepared by ``prepare_pretraining_data`` at the phase's data.max_seq_len (the
    tokenizer is the same for all: it is trained once and cached); ``with_sources`` completes a plan with what its
    knowledge units are read from (train.py's entity tagger)."""
    phases = cfg.trainer.phases
    bounds = phase_bounds([p.fraction for p in phases], int(cfg.trainer.max_steps))
    out = []
    for phase, (start, end) in zip(phases, bounds, strict=True):
        length = {"data": {"max_seq_len": phase.max_seq_len}}
        plan = resolve_run(OmegaConf.merge(cfg, length)).plan
        data = prepare_pretraining_data(OmegaConf.merge(data_cfg, length["data"]), with_sources(plan), seed)
        out.append(TrainingPhase(start, end, phase.batch_size or cfg.trainer.batch_size, data))
    return out


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
        )
        stop = (phase.end - phase.start - done) * accum
        yield from micro_batch_loader(micro, trainer.num_workers, stop=stop, pin_memory=pin_memory)


def blend_metrics(trainer) -> dict[str, float]:
    """The shares and epochs of a blend's sources (``data.sources``, data/layouts/blend.py) over the examples read from it
    so far (the current phase's, with trainer.phases); logged in words at the last step."""
    samples = trainer.samples_seen
    if trainer.phases:
        phase = next((p for p in trainer.phases if p.start < trainer.step <= p.end), trainer.phases[-1])
        samples = (trainer.step - phase.start) * trainer.layout.global_batch
    if trainer.step == trainer.max_steps and trainer.process.is_main:
        log.info("data.sources over the run: %s", trainer.train_examples.describe(samples))
    return trainer.train_examples.realized(samples)
