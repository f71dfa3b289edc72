"""Index-based batching: the position in the data is one integer, so resuming never replays data.

The training examples form an endless stream of epochs, each a seeded permutation of the dataset. Optimizer step s
(0-based, counted from the start position) takes the next ``global_batch = batch_size * grad_accum_steps *
world_size`` positions; micro-batch j of rank r takes rows ``(j * world_size + r) * batch_size`` onwards of that
block. With ``streams=True`` (Transformer-XL, XLNet) the examples are consecutive windows of one token stream and
are dealt out in order instead (``StreamOrder``): row b of rank r always continues sub-stream r * batch_size + b,
so each micro-batch holds the next window of every row's previous one; ``stream_start`` (B,) marks rows that begin
their sub-stream again (the first batch of a pass), where a carried memory must not continue. Every row's masking
seed is derived from its stream position, so a row is transformed the same way whatever micro-batch or process it
lands in: 8 x 4, 32 x 1 and 2 processes x 16 see identical data. A transform that changes with training (ERNIE's
masking stages) also gets the optimizer step of its micro-batch, counted from the run's start, so a resumed run
transforms exactly as an uninterrupted one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from plm_toolkit.data.batching.shapes import Shapes
from plm_toolkit.data.layouts.order import EpochPermutations, mix_seed


class LengthGroupedPermutations(EpochPermutations):
    """EpochPermutations with examples of similar length side by side: each shuffled epoch is cut into groups of
    ``batch`` * 50 positions (the scheme of Hugging Face's ``LengthGroupedSampler``), but at most a quarter of the
    data, so that batches are made up differently from epoch to epoch, and every group is sorted by length,
    longest first. Batches then pad little, and their order stays random."""

    def __init__(self, lengths: Sequence[int], seed: int, batch: int):
        super().__init__(len(lengths), seed)
        self.lengths = np.asarray(lengths)
        self.batch = max(int(batch), 1)
        self.group_size = self.batch * max(min(50, len(lengths) // (4 * self.batch)), 1)

    def __call__(self, position: int) -> int:
        epoch, offset = divmod(position, self.n)
        if epoch != self._epoch:
            rng = np.random.default_rng([self.seed, epoch])
            order = rng.permutation(self.n)
            # Batches start where the stream's do: the epoch may begin in the middle of one.
            first = (-epoch * self.n) % self.batch
            pieces = [order[:first]]
            for start in range(first, self.n, self.group_size):
                group = order[start : start + self.group_size]
                group = group[np.argsort(-self.lengths[group], kind="stable")]
                chunks = [group[i : i + self.batch] for i in range(0, len(group), self.batch)]
                # Whole batches in random order: no drift from long to short within a group.
                full = [c for c in chunks if len(c) == self.batch]
                pieces += [full[i] for i in rng.permutation(len(full))] + [c for c in chunks if len(c) < self.batch]
            self._perm = np.concatenate(pieces)
            self._epoch = epoch
        return int(self._perm[offset])


class StreamOrder:
    """Example index at stream position p when the examples are consecutive windows of one text.

    The windows are cut into ``num_streams`` contiguous sub-streams of ``per_stream`` windows (the remainder is
    dropped, as Transformer-XL's batchify does); position p reads window p // num_streams of sub-stream
    p % num_streams, so a batch of ``num_streams`` consecutive positions holds one window of every sub-stream and
    the next batch the windows that follow them. With ``backward_half`` the sub-streams of the second half of
    every batch of ``batch_size`` rows are read from their end (XLNet's bi_data; the objective reverses the
    tokens of those rows), so their memory, too, holds the text that precedes them in reading order.
    """

    def __init__(self, num_examples: int, num_streams: int, batch_size: int = 1, backward_half: bool = False):
        self.num_streams, self.batch_size, self.backward_half = num_streams, batch_size, backward_half
        self.per_stream = num_examples // num_streams
        if self.per_stream < 1:
            raise ValueError(f"{num_examples} windows cannot fill {num_streams} streams; lower the batch size")

    def starts(self, position: int) -> bool:
        """Whether position p reads the first window of its sub-stream (a new pass over the text begins)."""
        return position % (self.per_stream * self.num_streams) < self.num_streams

    def __call__(self, position: int) -> int:
        offset = position % (self.per_stream * self.num_streams)
        window, stream = divmod(offset, self.num_streams)
        if self.backward_half and stream % self.batch_size >= self.batch_size // 2:
            window = self.per_stream - 1 - window
        return stream * self.per_stream + window


@dataclass(frozen=True)
class BatchLayout:
    batch_size: int
    grad_accum_steps: int
    world_size: int = 1
    rank: int = 0

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.grad_accum_steps * self.world_size

    def positions(self, start: int, micro_index: int) -> range:
        """Stream positions of this rank's micro-batch number ``micro_index`` counted from ``start``."""
        step, j = divmod(micro_index, self.grad_accum_steps)
        first = start + step * self.global_batch + (j * self.world_size + self.rank) * self.batch_size
        return range(first, first + self.batch_size)


def take_rows(examples, indices: Sequence[int]) -> list[dict]:
    """Rows of a store view (``data/layouts/windows.py``: computed on the fly), a `datasets.Dataset` (one columnar read)
    or a list of dicts, as a list of dicts."""
    if hasattr(examples, "rows"):
        return examples.rows(indices)
    if hasattr(examples, "column_names"):
        columns = examples[list(indices)]
        return [dict(zip(columns, values, strict=True)) for values in zip(*columns.values(), strict=True)]
    return [examples[i] for i in indices]


class MicroBatches(Dataset):
    """Item k = this rank's k-th micro-batch from ``start``: collated, then transformed by the objective."""

    def __init__(
        self,
        examples,
        layout: BatchLayout,
        start: int,
        collate: Callable[[list[dict]], dict[str, torch.Tensor]],
        transform: Callable[[dict[str, torch.Tensor], Sequence[int]], dict[str, torch.Tensor]] | None,
        seed: int,
        shuffle: bool = True,
        static_copies: int = 0,
        streams: bool = False,
        backward_half: bool = False,
        group_lengths: Sequence[int] | None = None,
        first_step: int | None = None,
        shapes: Shapes | None = None,
    ):
        self.examples, self.layout, self.start = examples, layout, start
        # How the collate function pads (data/batching/shapes.py); None: to the longest row.
        self.shapes = shapes
        # Optimizer step of micro-batch 0, for a transform that changes with training (ERNIE's masking stages):
        # it is then called as transform(batch, seeds, step). None: transform(batch, seeds).
        self.first_step = first_step
        self.collate, self.transform, self.seed = collate, transform, seed
        if hasattr(examples, "blend_order"):  # data.sources: the blend's own order (data/layouts/blend.py)
            self.index_of = examples.blend_order(seed, shuffle)
        elif streams:
            streams_total = layout.batch_size * layout.world_size
            self.index_of = StreamOrder(len(examples), streams_total, layout.batch_size, backward_half)
        elif group_lengths is not None:
            self.index_of = LengthGroupedPermutations(group_lengths, seed, layout.global_batch)
        else:
            self.index_of = EpochPermutations(len(examples), seed, shuffle)
        self.static_copies = static_copies

    def __getitem__(self, micro_index: int) -> dict[str, torch.Tensor]:
        positions = self.layout.positions(self.start, micro_index)
        indices = [self.index_of(p) for p in positions]
        rows = take_rows(self.examples, indices)
        batch = self.collate(rows) if self.shapes is None else self.collate(rows, self.shapes)
        if self.transform is not None:
            seeds = [self.row_seed(p, i) for p, i in zip(positions, indices, strict=True)]
            if self.first_step is None:
                batch = self.transform(batch, seeds)
            else:
                batch = self.transform(batch, seeds, self.first_step + micro_index // self.layout.grad_accum_steps)
        if isinstance(self.index_of, StreamOrder):
            batch["stream_start"] = torch.tensor([self.index_of.starts(p) for p in positions])  # (B,)
        return batch

    def row_seed(self, position: int, index: int) -> int:
        """Dynamic masking: a fresh seed per stream position. Static (``static_copies`` = BERT's dupe_factor N):
        the seed of copy (epoch mod N) of example ``index``, so each example only ever sees its N fixed masks, as if
        they had been written out ahead of training (RoBERTa section 4.1 compares the two)."""
        if not self.static_copies:
            return mix_seed(self.seed, position)
        copy = (position // len(self.examples)) % self.static_copies
        return mix_seed(self.seed, index * self.static_copies + copy, stream=3)


class _Counter(Sampler):
    def __init__(self, stop: int | None = None):
        self.stop = stop

    def __iter__(self) -> Iterator[int]:
        k = 0
        while self.stop is None or k < self.stop:
            yield k
            k += 1


def micro_batch_loader(
    dataset: MicroBatches, num_workers: int, stop: int | None = None, pin_memory: bool = False
) -> DataLoader:
    """``pin_memory`` (for a CUDA run) lets the copy to the GPU run asynchronously."""
    return DataLoader(
        dataset,
        batch_size=None,
        sampler=_Counter(stop),
        num_workers=num_workers,
        persistent_workers=num_workers > 0,
        pin_memory=pin_memory,
    )


# Keys the evaluation sample's generator apart from the epoch permutations' ([seed, epoch]).
EVAL_SAMPLE_KEY = (0xE7A15A3F, 1)


def eval_rows(num_examples: int, batch_size: int, max_batches: int, seed: int) -> Sequence[int]:
    """The validation rows an evaluation reads, in file order: all of them when ``max_batches`` is 0 or they fill
    at most ``max_batches`` batches, else a sample of ``max_batches * batch_size`` rows drawn with ``seed`` from the
    whole set. The sample is the same at every evaluation and after a resume, so an eval curve compares like with
    like, and it speaks for the whole file rather than its first pages."""
    if max_batches <= 0 or num_examples <= max_batches * batch_size:
        return range(num_examples)
    rng = np.random.default_rng([seed, *EVAL_SAMPLE_KEY])
    return np.sort(rng.choice(num_examples, max_batches * batch_size, replace=False)).tolist()


def eval_stream_rounds(order: StreamOrder, world: int, max_batches: int) -> int:
    """Batches per process of a stream-order evaluation: the first windows of every sub-stream, at most
    ``max_batches`` batches in all (0: every window)."""
    return order.per_stream if max_batches <= 0 else min(order.per_stream, -(-max_batches // world))


def eval_scope(num_examples: int, batch_size: int, world: int, max_batches: int, streams: bool) -> str:
    """One log line saying which validation batches every evaluation scores."""
    if streams:
        order = StreamOrder(num_examples, batch_size * world)
        rounds, total = eval_stream_rounds(order, world, max_batches), order.per_stream * world
        if rounds == order.per_stream:
            return f"evaluation: all {total} validation batches, in stream order from an empty memory"
        return (
            f"evaluation: {rounds * world} of {total} validation batches: the first {rounds} windows of each of the "
            f"{order.num_streams} sub-streams (contiguous runs spread over the file, read in stream order from an "
            "empty memory, which needs contiguous text); trainer.eval_batches=0 scores all"
        )
    total = -(-num_examples // batch_size)
    rows = eval_rows(num_examples, batch_size, max_batches, 0)
    if len(rows) == num_examples:
        return f"evaluation: all {total} validation batches ({num_examples} rows)"
    return (
        f"evaluation: {max_batches} of {total} validation batches ({len(rows)} of {num_examples} rows), a fixed random "
        "sample spread over the file, the same at every evaluation; trainer.eval_batches=0 scores all"
    )


def eval_loader(
    examples,
    batch_size: int,
    world: int,
    rank: int,
    collate,
    transform,
    seed: int,
    max_batches: int,
    streams: bool = False,
    backward_half: bool = False,
):
    """Fixed validation batches (the same rows and masks at every evaluation: ``eval_rows``), split round-robin
    over processes; with ``streams`` the windows are dealt out in stream order as in training, from the start of
    every sub-stream."""
    if streams:
        order = StreamOrder(len(examples), batch_size * world, batch_size, backward_half)
        for b in range(eval_stream_rounds(order, world, max_batches)):
            positions = range((b * world + rank) * batch_size, (b * world + rank + 1) * batch_size)
            batch = eval_batch(examples, [order(p) for p in positions], positions, collate, transform, seed)
            batch["stream_start"] = torch.tensor([order.starts(p) for p in positions])  # (B,)
            yield batch
        return
    rows = eval_rows(len(examples), batch_size, max_batches, seed)
    for b in range(rank, -(-len(rows) // batch_size), world):
        chunk = rows[b * batch_size : (b + 1) * batch_size]
        yield eval_batch(examples, chunk, chunk, collate, transform, seed)


def eval_batch(examples, rows: Sequence[int], positions: Sequence[int], collate, transform, seed: int) -> dict:
    """The validation batch of ``rows``, its batch transform seeded by each row's ``positions`` (stream 1: apart
    from training's), so that its masks are the same at every evaluation."""
    batch = collate(take_rows(examples, rows))
    if transform is not None:
        batch = transform(batch, [mix_seed(seed, p, stream=1) for p in positions])
    return batch
