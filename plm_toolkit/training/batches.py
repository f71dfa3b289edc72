"""The loop's training batches: how the run's examples become batches (``Batching``), the items a micro-batch holds,
the loader from the run's data position, each example's length for trainer.group_by_length, and the check before
step 1 that a stream layout has enough windows for its streams (a Transformer-XL whose validation text held fewer
windows than trainer.batch_size used to train up to its first evaluation, then stop there)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from plm_toolkit.core.errors import DataError
from plm_toolkit.data.batching.loader import BatchLayout, MicroBatches, micro_batch_loader
from plm_toolkit.data.batching.packing import PackingTransform
from plm_toolkit.data.batching.shapes import Shapes
from plm_toolkit.data.layouts.plan import DataPlan
from plm_toolkit.training.compilation import SpeedSwitches
from plm_toolkit.training.distributed import ProcessInfo


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
        return cls(collate, transform, plan, int(seed), shapes, num_workers, pin_memory=device.type == "cuda")

    @property
    def takes_step(self) -> bool:
        """Whether the transform changes with training (ERNIE's masking stages) and gets each batch's step."""
        return getattr(self.transform, "takes_step", False)


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


def train_loader(
    batching: Batching, examples, layout: BatchLayout, samples_seen: int, step: int, group_by_length: bool
):
    """Micro-batches of ``examples`` from the data position ``samples_seen`` (after ``step`` optimizer steps), in
    the loader's workers."""
    return micro_batch_loader(
        MicroBatches(
            examples,
            layout,
            samples_seen,
            batching.collate,
            batching.transform,
            batching.seed,
            static_copies=batching.plan.static_copies,
            streams=batching.plan.streams,
            backward_half=batching.plan.backward_half,
            group_lengths=_lengths(examples) if group_by_length else None,
            first_step=step if batching.takes_step else None,
            shapes=batching.shapes,
        ),
        num_workers=batching.num_workers,
        pin_memory=batching.pin_memory,
    )


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
