"""Batches built by token count, as the Transformer was trained: "sentence pairs were batched together by
approximate sequence length. Each training batch contained a set of sentence pairs containing approximately 25000
source tokens and 25000 target tokens" (Vaswani et al. 2017, section 5.1).

Rows are sorted by length (source, then target; ties broken at random by the seed, so equal-length rows do not
always meet in the same batch) and cut greedily into batches whose *padded* size, rows x longest row, stays within
``max_tokens`` on each side; sorting first keeps the padding small. The batches are fixed once and their order is
shuffled every epoch by the loader, as fairseq does. The loader reads a batch list through ``TokenBatches``: item i
is the list of rows of batch i, so the index-based loader (``data/batching/loader.py``) deals out whole batches and
resuming stays exact.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def token_batches(
    source_lengths: Sequence[int],
    target_lengths: Sequence[int],
    max_tokens: int,
    seed: int = 0,
    max_rows: int = 0,
) -> list[list[int]]:
    """Row indices grouped into batches of at most ``max_tokens`` padded tokens per side (and at most ``max_rows``
    rows when positive). A row longer than ``max_tokens`` alone forms its own batch. Deterministic given ``seed``."""
    src = np.asarray(source_lengths, dtype=np.int64)
    tgt = np.asarray(target_lengths, dtype=np.int64)
    if len(src) != len(tgt):
        raise ValueError(f"{len(src)} source lengths but {len(tgt)} target lengths")
    ties = np.random.default_rng(seed).random(len(src))
    order = np.lexsort((ties, tgt, src))  # by source length, then target length, then at random
    batches: list[list[int]] = []
    current: list[int] = []
    longest_src = longest_tgt = 0
    for i in order.tolist():
        grown_src, grown_tgt = max(longest_src, int(src[i])), max(longest_tgt, int(tgt[i]))
        rows = len(current) + 1
        full = rows * grown_src > max_tokens or rows * grown_tgt > max_tokens or (max_rows and rows > max_rows)
        if current and full:
            batches.append(current)
            current, grown_src, grown_tgt = [], int(src[i]), int(tgt[i])
        current.append(i)
        longest_src, longest_tgt = grown_src, grown_tgt
    if current:
        batches.append(current)
    return batches


class TokenBatches:
    """A list of batches over an example view (``data/layouts/windows.py``): item i is the list of rows (dicts) of
    batch i."""

    # The training loop takes one item per micro-batch instead of trainer.batch_size (training/loop.py).
    ready_batches = True

    def __init__(self, examples, batches: list[list[int]]):
        self.examples, self.batches = examples, batches

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> list[dict]:
        return self.examples.rows(self.batches[i])

    def num_rows(self) -> int:
        return sum(len(b) for b in self.batches)
