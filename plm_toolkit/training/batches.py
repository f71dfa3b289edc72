"""The loop's training batches: how the run's examples become batches (``Batching``), the items a micro-batch holds,
the loader from the run's data position (phase after phase with trainer.phases), each example's length for
trainer.group_by_length, and the check before step 1 that a stream layout has enough windows for its streams (a
Transformer-XL whose validation text held fewer windows than trainer.batch_size used to train up to its first
evaluation, then stop there)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence
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
    # trainer.group_by_length: the training rows of a batch are of similar length (not with trainer.phases).
    group_by_length: bool = False

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
        group_by_length: bool = False,
    ) -> Batching:
        """The batching of a run: a compiled step gets a few fixed batch shapes, ``longest`` the longest row
        (windows of a token stream, a plan with a window, all have its width already); hardware.unpad packs rows."""
        shapes = Shapes.compiled(longest) if switches.compile and plan.window is None else None
        transform = PackingTransform(plan.transform, shapes) if switches.unpad else plan.transform
        pin_memory = device.type == "cuda"
        return cls(collate, transform, plan, int(seed), shapes, num_workers, pin_memory, bool(group_by_length))

    @property
    def takes_step(self) -> bool:
        """Whether the transform changes with training (ERNIE's masking stages) and gets each batch's step."""
        return getattr(self.transform, "takes_step", False)

    def reader(
        self,
        examples,
        layout: BatchLayout,
        start: int,
        step: int,
        group_lengths: Sequence[int] | None = None,
        stop: int | None = None,
        max_seq_len: int | None = None,
    ):
        """Micro-batches of ``examples`` from the data position ``start`` (after ``step`` optimizer steps), in the
        loader's workers: ``stop`` of them (None: endless), their rows of similar length side by side where
        ``group_lengths`` are given (trainer.group_by_length), in the run's batch shapes up to ``max_seq_len`` (a
        phase's length)."""
        shapes = self.shapes.capped(max_seq_len) if self.shapes and max_seq_len else self.shapes
        micro = MicroBatches(
            examples,
            layout,
            start,
            self.collate,
            self.transform,
            self.seed,
            static_copies=self.plan.static_copies,
            streams=self.plan.streams,
            backward_half=self.plan.backward_half,
            group_lengths=group_lengths,
            first_step=step if self.takes_step else None,
            shapes=shapes,
        )
        return micro_batch_loader(micro, num_workers=self.num_workers, stop=stop, pin_memory=self.pin_memory)


def rows_per_batch(examples, trainer_cfg) -> int:
    """Items per micro-batch: trainer.batch_size examples, or one item where the examples come in ready-made
    batches (``ready_batches``: token-count batches of sentence pairs, data/layouts/token_batches.py)."""
    return 1 if getattr(examples, "ready_batches", False) else trainer_cfg.batch_size


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
    """Training batches over one set of examples: the run's, or with trainer.phases one phase's. When it begins, the
    Trainer takes its examples, validation examples and batch layout as its own, so that evaluation and the
    examples counted follow it."""

    examples: Any
    validation: Any
    layout: BatchLayout
    batches: Iterable[dict[str, torch.Tensor]]


def training_stretches(
    batching: Batching,
    examples,
    validation,
    layout: BatchLayout,
    samples_seen: int,
    step: int,
    phases: list[TrainingPhase] | None,
) -> Iterator[TrainingStretch]:
    """The training micro-batches from the data position ``samples_seen`` (after ``step`` optimizer steps): of the
    run's ``examples``, or of the ``phases`` still ahead, phase after phase, each phase's built as it begins.

    A phase reads its examples from its own start: micro-batch k of a phase is a pure function of (seed, k), so a
    run resumed at step s inside phase p starts that phase's reader at (s - start of p) global batches, where the
    run that was not interrupted is at that step."""
    if not phases:
        lengths = _lengths(examples) if batching.group_by_length else None
        batches = batching.reader(examples, layout, samples_seen, step, lengths)
        yield TrainingStretch(examples, validation, layout, batches)
        return
    for phase in phases:
        if phase.end <= step:
            continue
        done = max(step - phase.start, 0)  # steps of this phase already taken (a run resumed inside it)
        layout = dataclasses.replace(layout, batch_size=phase.batch_size)
        stop = (phase.end - phase.start - done) * layout.grad_accum_steps
        start = done * layout.global_batch
        batches = batching.reader(phase.data.train, layout, start, phase.start + done, None, stop, phase.max_seq_len)
        yield TrainingStretch(phase.data.train, phase.data.validation, layout, batches)


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
