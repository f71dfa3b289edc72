"""A corpus sampled for a vocabulary (one to train, or the words an extension adds): the whole of a small one, or the
documents at the start of stretches spread evenly over a large one, planned as pieces (``data/sources/pieces.py``)
and read as documents (``data/sources/piece_reader.py``), the same on every run."""

from __future__ import annotations

from collections.abc import Iterator

from plm_toolkit.data.sources.piece_reader import read_piece
from plm_toolkit.data.sources.pieces import Source, plan_pieces

# The training text is sampled from this many stretches spread evenly over the corpus (at most).
SAMPLE_STRETCHES = 64


def sample_texts(sources: list[Source], budget: int, boundary: str, column: str) -> Iterator[str]:
    """The documents of a corpus of at most ``budget`` bytes; of a larger one, the documents at the start of
    SAMPLE_STRETCHES stretches spread evenly over it, about ``budget`` bytes in all (the same on every run)."""
    total = sum(s.size for s in sources)
    if total <= budget:
        pieces = plan_pieces(sources, max(total, 1), boundary)
        share = budget
    else:
        pieces = plan_pieces(sources, max(total // SAMPLE_STRETCHES, 1 << 12), boundary)
        share = max(budget // len(pieces), 1)
    for piece in pieces:
        taken = 0
        for text, _ in read_piece(sources[piece.source], piece, boundary, column, lambda _: None):
            yield text
            taken += len(text)
            if taken >= share:
                break
