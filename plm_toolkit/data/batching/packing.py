"""Unpadding (``hardware.unpad``): the sequences of a right-padded batch moved into as few rows as hold them, each
attending only to itself, so that padding costs no compute (packed BERT, Krell et al. 2021; MosaicBERT and
ModernBERT remove padding the same way before the first layer).

A packed batch keeps a fixed set of shapes (data/batching/shapes.py): its row count is rounded up to a bucket and
its target positions fill a budget that depends on the shape alone, so a compiled step builds one graph per bucket.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from plm_toolkit.data.batching.collate import target_positions
from plm_toolkit.data.batching.shapes import Shapes


def first_fit(lengths: list[int], width: int) -> list[list[int]]:
    """Rows of ``width`` tokens filled with the sequences of ``lengths``, first fit, longest first."""
    bins: list[list[int]] = []
    room = np.empty(len(lengths), dtype=np.int64)  # the free tokens of each bin opened so far
    for row in sorted(range(len(lengths)), key=lambda r: -lengths[r]):
        length = lengths[row]
        fits = room[: len(bins)] >= length
        fit = int(fits.argmax()) if len(bins) and fits.any() else None
        if fit is None:
            room[len(bins)] = width - length
            bins.append([row])
        else:
            bins[fit].append(row)
            room[fit] -= length
    return bins


def pack_rows(
    batch: dict[str, torch.Tensor],
    shapes: Shapes | None = None,
    budget: Callable[[int, int, int], int] | None = None,
    drop_row_fields: bool = False,
) -> dict[str, torch.Tensor]:
    """Move the sequences of a right-padded batch into as few rows as hold them, rounded up as ``shapes`` says.

    Every (B, T) field moves with its tokens; ``attention_mask`` (R, T) still marks real tokens, and two fields are
    added: ``position_ids`` (R, T), counting from 0 in each sequence, and ``sequence_ids`` (R, T): 1, 2, ... for
    the sequences of a row and -1, -2, ... (one number each) on padding, so that "same sequence id" is the
    block-diagonal attention mask and a padding position attends only to itself (no softmax row is empty).
    Fields named <name>_positions (the flat target positions of <name>_labels) are rebuilt from the moved labels,
    to ``budget(rows, width, sequences)`` entries. Per-token losses are unchanged; per-row fields (an NSP label)
    cannot be packed: they are refused, or dropped with ``drop_row_fields`` (for an objective whose loss is
    per-token only, which never reads them).
    """
    mask = batch["attention_mask"]
    rows, width = mask.shape
    derived = [key for key in batch if key.endswith("_positions")]
    batch = {key: value for key, value in batch.items() if key not in derived}
    if drop_row_fields:
        batch = {key: value for key, value in batch.items() if value.shape[:2] == (rows, width)}
    for key, value in batch.items():
        if value.shape[:2] != (rows, width):
            raise ValueError(f"cannot pack the per-row field {key!r}: only per-token (B, T) fields move with tokens")
    lengths = mask.sum(dim=1).tolist()
    bins = first_fit(lengths, width)
    count = (shapes or Shapes()).rows(len(bins), rows)
    # Padding keeps each field's own padding value (pad id, IGNORE label, ...), read off a padded position.
    padded = next((r for r in range(rows) if lengths[r] < width), None)
    packed = {
        key: torch.full((count, width), value[padded, -1].item() if padded is not None else 0, dtype=value.dtype)
        for key, value in batch.items()
    }
    position_ids = torch.zeros((count, width), dtype=torch.long)
    sequence_ids = -torch.arange(1, width + 1).repeat(count, 1)  # (R, T): each padding position its own
    # Where each row's tokens go: its bin's row, after the sequences placed there before it. One scatter per field
    # moves every real token at once (row-major order on both sides).
    start, number = [0] * rows, [0] * rows
    for b, members in enumerate(bins):
        offset = b * width
        for n, row in enumerate(members, start=1):
            start[row], number[row] = offset, n
            offset += lengths[row]
    columns = torch.arange(width)
    real = columns[None, :] < torch.tensor(lengths)[:, None]  # (B, T)
    destination = (torch.tensor(start)[:, None] + columns[None, :])[real]  # (N,) flat positions in (R, T)
    for key, value in batch.items():
        packed[key].view(-1)[destination] = value[real]
    position_ids.view(-1)[destination] = columns.expand(rows, width)[real]
    sequence_ids.view(-1)[destination] = torch.tensor(number)[:, None].expand(rows, width)[real]
    for key in derived:
        labels = packed[key.removesuffix("_positions") + "_labels"]
        packed[key] = target_positions(labels, budget(count, width, rows) if budget else int((labels != -100).sum()))
    packed["position_ids"] = position_ids
    packed["sequence_ids"] = sequence_ids
    return packed


def block_diagonal_mask(sequence_ids: torch.Tensor) -> torch.Tensor:
    """(R, T) sequence ids of a packed batch -> (R, 1, T, T) bool: a token may attend to its own sequence's."""
    return sequence_ids[:, None, :, None] == sequence_ids[:, None, None, :]  # (R, 1, T, T)


class PackingTransform:
    """An objective's batch transform followed by ``pack_rows`` (``hardware.unpad``); picklable for workers. The
    objective reads packed rows (``Objective.reads_packed_rows``: per-token losses only), so per-row fields that the
    data brings along (the NSP label of sentence pairs read by objective=mlm) are dropped."""

    def __init__(self, inner, shapes: Shapes | None = None) -> None:
        self.inner, self.shapes = inner, shapes
        # A step-dependent inner transform (plan.py) gets the optimizer step through this one.
        self.takes_step = bool(getattr(inner, "takes_step", False))

    def __call__(self, batch: dict[str, torch.Tensor], seeds, *step: int) -> dict[str, torch.Tensor]:
        batch = self.inner(batch, seeds, *step) if self.inner is not None else batch
        return pack_rows(batch, self.shapes, getattr(self.inner, "target_budget", None), drop_row_fields=True)
