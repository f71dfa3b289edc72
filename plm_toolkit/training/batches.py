"""The loop's training batches: how the run's examples become batches (``Batching``), the items a micro-batch holds,
the run's length in batches (``run_length``), what is left to train from the run's data position
(``stretches_ahead``: phase after phase with trainer.phases) and its loader, each example's length for
trainer.group_by_length, and the check before step 1 that a stream layout has enough windows for its streams (a
Transformer-XL whose validation text held fewer windows than trainer.batch_size used to train up to its first
evaluation, then stop there)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from plm_toolkit.core.errors import DataError
from plm_toolkit.data.batching.loader import BatchLayout, MicroBatches, micro_batch_loader
from plm_toolkit.data.batching.packing import PackingTransform
from plm_toolkit.data.batching.shapes import Shapes
from plm_toolkit.data.layouts.plan import DataPlan
from plm_toolkit.training.compilation import SpeedSwitches
from plm_toolkit.training.distributed import ProcessInfo
from plm_toolkit.training.phases import TrainingPhase


@dataclass(frozen=True)
class Batching:
    """How the run's examples become batches, for training and evaluation alike."""

    collate: Callable[[list[dict]], dict[str, torch.Tensor]]
    # The objective's batch transform (masking, permutations, ...), packing rows under hardware.unpad.
    transform: Callable[[dict[str, torch.Tensor], Sequence[int]], dict[str, torch.Tensor]]
    # The order of the examples and their static copies (the objective's data plan).
    plan: DataPlan
    seed: int
    # The few batch shapes a compiled step gets (data/batching/shapes.py), or None.
    shapes: Shapes | None = None
    num_workers: int = 0
    # A CUDA run pins its batches, so that the copy to the device runs asynchronously.
    pin_memory: bool = False

    @classmethod
    def for_run(
        cls,
        plan: DataPlan,
        collate: Callable[[list[dict]], dict[str, torch.Tensor]],
        switches: SpeedSwitches,
        longest: int | None,
        seed: int,
        num_workers: int,
        device: torch.device,
    ) -> Batching:
        """The batching of a run: a compiled step gets a few fixed batch shapes, ``longest`` the longest row
        (windows of a token stream, a plan with a window, all have its width already); hardware.unpad packs rows."""
        shapes = Shapes.compiled(longest) if switches.compile and plan.window is None else None
        transform = PackingTransform(plan.transform, shapes) if switches.unpad else plan.transform
        pin_memory = device.type == "cuda"
        return cls(collate, transform, plan, int(seed), shapes, num_workers, pin_memory)

    @property
    def takes_step(self) -> bool:
        """Whether the transform changes with training (ERNIE's masking stages) and gets each batch's step."""
        return getattr(self.transform, "takes_step", False)

    def reader(self, stretch: TrainingStretch):
        """The micro-batches of a stretch of training (``stretches_ahead``), in the loader's workers."""
        lengths = _lengths(stretch.examples) if stretch.group_by_length else None
        longest = stretch.max_seq_len
        micro = MicroBatches(
            stretch.examples,
            stretch.layout,
            stretch.start,
            self.collate,
            self.transform,
            self.seed,
            static_copies=self.plan.static_copies,
            streams=self.plan.streams,
            backward_half=self.plan.backward_half,
            group_lengths=lengths,
            first_step=stretch.first_step if self.takes_step else None,
            shapes=self.shapes.capped(longest) if self.shapes and longest else self.shapes,
        )
        return micro_batch_loader(micro, self.num_workers, stop=stretch.stop, pin_memory=self.pin_memory)


def rows_per_batch(examples, trainer_cfg) -> int:
    """Items per micro-batch: trainer.batch_size examples, or one item where the examples come in ready-made
    batches (``ready_batches``: token-count batches of sentence pairs, data/layouts/token_batches.py)."""
    return 1 if getattr(examples, "ready_batches", False) else trainer_cfg.batch_size


def run_length(trainer_cfg, num_examples: int, global_batch: int) -> int:
    """Optimizer steps of the run: trainer.max_steps, or trainer.epochs passes over the training examples in batches
    of ``global_batch``."""
    if trainer_cfg.max_steps is not None:
        return int(trainer_cfg.max_steps)
    if trainer_cfg.epochs == 0:  # plm-finetune's evaluation only
        return 0
    return max(1, math.ceil(trainer_cfg.epochs * num_examples / global_batch))


def check_streams(examples, batch_size: int, process: ProcessInfo, key: str, plan: DataPlan) -> None:
    """A stream layout (Transformer-XL, XLNet) reads ``batch_size`` windows side by side per process, each stream a
    contiguous part of the text: refuse, naming ``key`` and trainer.batch_size, text too short to fill them."""
    streams = batch_size * process.world_size
    if not plan.streams or len(examples) >= streams:
        return
    processes = f" x {process.world_size} processes" if process.distributed else ""
    raise DataError(
        f"{key}: {len(examples)} window(s) of data.max_seq_len tokens, fewer than the {streams} streams "
        f"(trainer.batch_size={batch_size}{processes}) that read the text side by side; give a longer text or a "
        "smaller trainer.batch_size"
    )


@dataclass(frozen=True)
class TrainingStretch:
    """Training over one set of examples, the run's or with trainer.phases one phase's, from the data position where
    it starts. When it begins, the Trainer takes its examples, validation examples and batch layout as its own, so
    that evaluation and the examples counted follow it; ``Batching.reader`` reads its micro-batches."""

    examples: Any
    validation: Any
    layout: BatchLayout
    # The data position of its first micro-batch, and the optimizer steps before it (counted from the run's start).
    start: int
    first_step: int
    # Its micro-batches (None: as many as the loop reads).
    stop: int | None = None
    # A phase's data.max_seq_len, which caps the run's batch shapes.
    max_seq_len: int | None = None
    # trainer.group_by_length: rows of similar length side by side (the run's examples only, not a phase's).
    group_by_length: bool = False


def stretches_ahead(
    examples,
    validation,
    layout: BatchLayout,
    samples_seen: int,
    step: int,
    phases: list[TrainingPhase] | None,
    group_by_length: bool,
) -> list[TrainingStretch]:
    """What is left to train from the data position ``samples_seen`` (after ``step`` optimizer steps): the run's
    ``examples``, or the ``phases`` still ahead, phase after phase.

    A phase reads its examples from its own start: micro-batch k of a phase is a pure function of (seed, k), so a
    run resumed at step s inside phase p starts that phase's reader at (s - start of p) global batches, where the
    run that was not interrupted is at that step."""
    if not phases:
        return [TrainingStretch(examples, validation, layout, samples_seen, step, group_by_length=group_by_length)]
    stretches = []
    for phase in phases:
        if phase.end <= step:
            continue
        done = max(step - phase.start, 0)  # steps of this phase already taken (a run resumed inside it)
        phase_layout = dataclasses.replace(layout, batch_size=phase.batch_size)
        start, stop = done * phase_layout.global_batch, (phase.end - phase.start - done) * layout.grad_accum_steps
        data, first_step = phase.data, phase.start + done
        stretches.append(
            TrainingStretch(data.train, data.validation, phase_layout, start, first_step, stop, phase.max_seq_len)
        )
    return stretches


class StretchBatches:
    """The micro-batches of ``stretches``, one stretch after the other, each read by ``batching.reader``;
    ``begin(stretch)`` is called as each begins (the Trainer takes its examples and layout). The first stretch's
    loader is built at once, its workers started by ``start``, each later one's as it begins."""

    def __init__(self, batching: Batching, stretches: list[TrainingStretch], begin: Callable[[TrainingStretch], None]):
        self.batching, self.stretches, self.begin = batching, stretches, begin
        self.first = batching.reader(stretches[0]) if stretches else ()

    def start(self) -> Iterator[dict[str, torch.Tensor]]:
        """The micro-batches; the first stretch's loader starts its workers now (the loop starts them inside its
        signal handlers, which they inherit: training/loop.py)."""
        if self.stretches:
            self.begin(self.stretches[0])
        return self._one_after_the_other(iter(self.first))

    def _one_after_the_other(self, first: Iterator) -> Iterator[dict[str, torch.Tensor]]:
        yield from first
        for stretch in self.stretches[1:]:
            self.begin(stretch)
            yield from self.batching.reader(stretch)


def _column(examples, name: str):
    """One column of a list of dicts or of a ``datasets.Dataset``."""
    return examples[name] if hasattr(examples, "column_names") else [e[name] for e in examples]


def _lengths(examples) -> list[int]:
    """Each example's padded width, for trainer.group_by_length: its input, or the longer side of a sentence pair."""
    if hasattr(examples, "lengths"):  # a token store's view knows them without building every example
        return examples.lengths()
    first = examples[0]
    if "input_ids" in first:
        return [len(ids) for ids in _column(examples, "input_ids")]
    pairs = zip(_column(examples, "source_ids"), _column(examples, "target_ids"), strict=True)
    return [max(len(s), len(t)) for s, t in pairs]
