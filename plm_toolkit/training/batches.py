"""The loop's training batches: the items a micro-batch holds, the loader from the run's data position, each
example's length for
trainer.group_by_length, and the check before step 1 that a stream layout has enough windows for its streams (a
Transformer-XL whose validation text held fewer windows than trainer.batch_size used to train up to its first
evaluation, then stop there)."""

from __future__ import annotations

from plm_toolkit.core.errors import DataError
from plm_toolkit.data.batching.loader import MicroBatches, micro_batch_loader
from plm_toolkit.data.layouts.plan import DataPlan
from plm_toolkit.training.distributed import ProcessInfo


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


def train_loader(trainer):
    """The trainer's micro-batches from its current data position (``samples_seen``), in its loader's workers."""
    lengths = _lengths(trainer.train_examples) if trainer.cfg.group_by_length else None
    return micro_batch_loader(
        MicroBatches(
            trainer.train_examples,
            trainer.layout,
            trainer.samples_seen,
            trainer.collate,
            trainer.transform,
            trainer.cfg.seed,
            static_copies=trainer.plan.static_copies,
            streams=trainer.plan.streams,
            backward_half=trainer.plan.backward_half,
            group_lengths=lengths,
            first_step=trainer.step if getattr(trainer.transform, "takes_step", False) else None,
            shapes=trainer.shapes,
        ),
        num_workers=trainer.num_workers,
        pin_memory=trainer.runtime.device.type == "cuda",
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
