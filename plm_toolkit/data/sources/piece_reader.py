"""Reading one piece of a corpus (``data/sources/pieces.py``) as a stream of documents, by its format: a text or JSONL
file, maybe compressed (``data/sources/text_files.py``), a Parquet file (``data/sources/parquet.py``), a saved
dataset's rows (``data/sources/saved_datasets.py``). Each gives (text, ends): a document, or a fragment of a long one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from plm_toolkit.data.sources.documents import split_text
from plm_toolkit.data.sources.parquet import parquet_documents
from plm_toolkit.data.sources.pieces import Piece, Source
from plm_toolkit.data.sources.text_files import text_file_documents


def read_piece(
    source: Source, piece: Piece, boundary: str, text_column: str, progress: Callable[[int], None], digest=None
) -> Iterator[tuple[str, bool]]:
    """(text, ends) in corpus order: a document, or a fragment of one with ``ends`` False where it goes on in the
    next. ``progress(done)`` reports how many of the piece's bytes (compressed bytes; a saved dataset's share of
    its size) have been read; ``digest`` (a hashlib object) gets the piece's bytes as read."""
    if source.format == "saved":
        yield from _saved_documents(source, piece, boundary, text_column, progress)
        return
    if source.format == "parquet":
        yield from parquet_documents(source.path, piece.start, piece.end, text_column, progress, digest)
        return
    yield from text_file_documents(source, piece, boundary, text_column, progress, digest)


def _saved_documents(source: Source, piece: Piece, boundary: str, column: str, progress) -> Iterator[tuple[str, bool]]:
    from plm_toolkit.data.sources.saved_datasets import open_saved_split  # datasets: only where one is read

    _, dataset = open_saved_split(Path(source.path), source.subset, column)
    rows = dataset.select_columns([column]).select(range(piece.start, piece.end))
    done = 0
    for batch in rows.iter(batch_size=1000):
        for text in batch[column]:
            for document in split_text(text or "", boundary):
                yield document, True
        done += len(batch[column])
        progress(done * source.size // max(source.rows, 1))
