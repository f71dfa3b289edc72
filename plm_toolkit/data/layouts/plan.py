"""What the data side needs to know from an objective, in one place: the objective's data plan.

The objective returns it (``Objective.data_plan``) from its config, the data config and the model config, before
anything is built: validation reads its layout, the data entry point builds the examples from it, and the loop reads
batches in its order through its transform. What each layout is and how its data is built is
``data/layouts/registry.py``'s; a new kind of data is a new layout registered there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

import torch

# A batch transform: (collated CPU batch, one seed per row) -> batch. All randomness of row i comes from seeds[i]
# and is drawn over the row's unpadded length, so the result does not depend on how rows are grouped into
# micro-batches or processes, nor on how much padding a batch has. A transform whose ``takes_step`` attribute is
# true changes with training (ERNIE's masking stages): training calls it with the optimizer step as a third
# argument (data/batching/loader.py), evaluation without.
BatchTransform = Callable[[dict[str, torch.Tensor], Sequence[int]], dict[str, torch.Tensor]]


# sentence_pairs: BERT's, B random half the time (NSP); segment_pairs: two consecutive segments of one document,
# in order (SOP swaps them per batch); full_sentences: RoBERTa's packing; streams: windows of one token stream;
# parallel: source-target sentence pairs (data=parallel, data/layouts/translation_pairs.py), read in token-count
# batches. sentence_streams: ELMo's, windows of a stream of <S> ... </S> sentences and of the same sentences reversed.
class Layout(str, Enum):
    """A layout's name; compares, hashes, prints and digests (``repr``, which cache keys read) as its text, so that a
    config value, a store's settings and the code's constants are interchangeable."""

    sentence_pairs = "sentence_pairs"
    segment_pairs = "segment_pairs"
    full_sentences = "full_sentences"
    streams = "streams"
    parallel = "parallel"
    sentence_streams = "sentence_streams"

    __str__ = str.__str__
    __repr__ = str.__repr__
    __format__ = str.__format__


# shuffled: a seeded permutation of the examples per epoch; stream: consecutive windows dealt out in order over
# batch_size sub-streams, so that a carried memory continues each row's text (Transformer-XL section 3.2).
ORDERS = ("shuffled", "stream")


@dataclass(frozen=True)
class DataPlan:
    # How examples are cut from the corpus (a layout of data/layouts/registry.py).
    layout: str = Layout.full_sentences
    # Stream layouts: tokens per window and the distance between consecutive window starts.
    window: int | None = None
    stride: int | None = None
    # How the loader reads the examples (ORDERS).
    order: str = "shuffled"
    # 0: the batch transform draws afresh for every batch (dynamic masking). N > 0: each example gets N fixed
    # draws, used in turn epoch after epoch (BERT's static masking with dupe_factor N).
    static_copies: int = 0
    # stream order: the second half of every batch reads its sub-streams backwards (XLNet's bi_data).
    backward_half: bool = False
    # Runs on the CPU in the data-loader workers (masking, swaps, permutation sampling); None: batches as collated.
    transform: BatchTransform | None = None
    # Where knowledge units come from (an objective config that data/units/corpus.py reads), or None. With them the
    # corpus is tokenized with a join code per token and full-sentences examples carry a ``units`` column.
    units: Any = None
    # Whether examples carry, beside their ids, the spelling of every token the vocabulary maps to unk
    # (data/tokenization/spellings.py): for a backbone that reads characters, which must read such a word as written.
    spellings: bool = False

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise ValueError(f"order must be one of {ORDERS}, got {self.order!r}")

    @property
    def streams(self) -> bool:
        """Whether the loader deals the examples out in stream order."""
        return self.order == "stream"

    def with_transform(self, transform: BatchTransform | None) -> DataPlan:
        return dataclasses.replace(self, transform=transform)
