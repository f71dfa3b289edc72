"""The shapes the training loop hands a compiled step: a few fixed ones, so that torch.compile builds one graph per
shape and never again (``hardware.compile``).

A batch's width (its longest row) is rounded up to a multiple of ``multiple`` tokens, but never past ``longest``,
the longest row the data can hold (a phase's data.max_seq_len): over a run the widths then take at most
``ceil(longest / multiple)`` values, and a 32-token phase still pads to 32, not to 64. Packed batches
(``hardware.unpad``) hold as many rows as their sequences need; that count is rounded up to a multiple of an
eighth of the micro-batch (``row_buckets``), so the packed shapes are a small set too, each a fixed token budget of
rows x width. ``Shapes()`` (multiple 1) pads to the longest row, as eager training always has.
"""

from __future__ import annotations

from dataclasses import dataclass

# Sequence widths come in multiples of this many tokens when the step is compiled: few enough shapes to compile
# each once, and a multiple of the 8 (fp16/bf16) or 16 tokens that tensor cores want.
COMPILED_WIDTH_MULTIPLE = 64
# Packed rows come in multiples of this share of the micro-batch's rows.
PACKED_ROW_BUCKETS = 8


@dataclass(frozen=True)
class Shapes:
    # Round widths up to a multiple of this (1: the longest row of the batch).
    multiple: int = 1
    # Never pad a width past this (the longest row the data holds); None: no limit.
    longest: int | None = None
    # Packed rows: round their count up to a multiple of 1/row_buckets of the micro-batch's rows (0: no rounding).
    row_buckets: int = 0

    @classmethod
    def compiled(cls, longest: int | None) -> Shapes:
        return cls(COMPILED_WIDTH_MULTIPLE, longest, PACKED_ROW_BUCKETS)

    def width(self, longest_row: int) -> int:
        """The padded width of a batch whose longest row holds ``longest_row`` tokens."""
        padded = -(-longest_row // self.multiple) * self.multiple
        if self.longest is not None:
            padded = min(padded, max(self.longest, longest_row))
        return max(padded, 1)

    def rows(self, needed: int, most: int) -> int:
        """Rows of a packed batch whose sequences fill ``needed`` rows, out of the micro-batch's ``most``."""
        step = -(-most // self.row_buckets) if self.row_buckets else 1
        return min(max(-(-needed // step) * step, 1), max(most, needed))

    def capped(self, longest: int | None) -> Shapes:
        """The same rounding for data whose rows hold at most ``longest`` tokens."""
        return Shapes(self.multiple, longest, self.row_buckets)

    def buckets(self) -> int | None:
        """How many widths a run can see (None without a limit)."""
        return None if self.longest is None else -(-self.longest // self.multiple)
