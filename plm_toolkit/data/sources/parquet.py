"""Parquet corpora (FineWeb, RedPajama, the Hugging Face Hub's parquet exports): one document per row, its text in
the ``data.text_column`` column, read with pyarrow (which ``datasets`` brings) row group by row group, so that a
worker holds one row group's column at a time whatever the file's size.

A file's pieces (``data/sources/pieces.py``) are runs of whole row groups of about ``data.shard_bytes`` bytes of data
(as decompressed, so that a piece holds about as much text as a text file's); a piece's [start, end) counts the row
groups' sizes from the first (not file offsets), so that progress and the split of work read in bytes as for text
files. The file is checked when it is planned (a readable footer, a
string column of that name), so that a bad file is refused before any work, in one line naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from plm_toolkit.core.errors import DataError

SUFFIXES = (".parquet", ".pq")
# Rows decoded at a time: pyarrow's peak grows with a batch's bytes (a 1,024-row batch of 20 kB documents took 60 MB
# above a worker's start, a 64-row one 30 MB), and 64 documents still make batches large enough for the tokenizer.
_ROWS_PER_BATCH = 64


def _pyarrow():
    import pyarrow as pa
    import pyarrow.parquet as pq

    return pa, pq


def open_parquet(path: str | Path, column: str | None, key: str = "data.text_column"):
    """The ``pyarrow.parquet.ParquetFile`` at ``path`` (read through a 1 MB buffer, not a column chunk at once);
    DataError naming the file when it does not read as Parquet, or (with ``column``) has no string column of that
    name."""
    pa, pq = _pyarrow()
    try:
        parquet = pq.ParquetFile(path, buffer_size=1 << 20)
    except (pa.ArrowException, OSError) as err:
        raise DataError(f"{path}: not a readable Parquet file ({_first_line(err)}); truncated or cut short?") from None
    if column is None:
        return parquet
    schema = parquet.schema_arrow
    if column not in schema.names:
        raise DataError(f"{path}: no column {column!r} ({key}); its columns are {schema.names}")
    kind = schema.field(column).type
    if not _holds_text(pa, kind):
        raise DataError(f"{path}: column {column!r} ({key}) holds {kind}, not text (a string column)")
    return parquet


def _holds_text(pa, kind) -> bool:
    """A column of strings: plain, large or view, or dictionary-encoded (each row an index into distinct strings,
    as pandas' categoricals and many writers store a column with repeated values)."""
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)


def _first_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


def row_group_sizes(parquet) -> np.ndarray:
    """Each row group's uncompressed bytes (at least 1, so that every row group has its own place)."""
    metadata = parquet.metadata
    return np.asarray([max(metadata.row_group(k).total_byte_size, 1) for k in range(metadata.num_row_groups)], np.int64)


def parquet_pieces(path: str, shard_bytes: int) -> list[tuple[int, int]]:
    """[start, end) of each piece of the file: whole row groups, about ``shard_bytes`` bytes of data each."""
    sizes = row_group_sizes(open_parquet(path, None))
    starts = np.concatenate([[0], np.cumsum(sizes)])
    pieces, first = [], 0
    for k in range(len(sizes)):
        if starts[k + 1] - starts[first] >= shard_bytes or k == len(sizes) - 1:
            pieces.append((int(starts[first]), int(starts[k + 1])))
            first = k + 1
    return pieces


def parquet_documents(
    path: str, start: int, end: int, column: str, progress: Callable[[int], None], digest=None
) -> Iterator[tuple[str, bool]]:
    """(text, True) for every non-empty row of the row groups that begin in [start, end); ``digest`` gets each
    text's UTF-8 bytes (the piece's fingerprint)."""
    parquet = open_parquet(path, column)
    starts = np.concatenate([[0], np.cumsum(row_group_sizes(parquet))])
    groups = [k for k in range(len(starts) - 1) if start <= starts[k] < end]
    pa, _ = _pyarrow()
    for k in groups:
        try:
            batches = parquet.iter_batches(_ROWS_PER_BATCH, row_groups=[k], columns=[column], use_threads=False)
            for batch in batches:
                for text in batch.column(0).to_pylist():
                    if text is None or not text.strip():
                        continue
                    if digest is not None:
                        digest.update(text.encode("utf-8"))
                    yield text, True
        except (pa.ArrowException, OSError) as err:
            raise DataError(f"{path}: row group {k} does not read ({_first_line(err)}); a damaged file?") from None
        pa.default_memory_pool().release_unused()  # the allocator keeps a row group's pages otherwise (+8 MB here)
        progress(int(starts[k + 1]) - start)


def read_table_rows(path: str | Path) -> list[dict]:
    """Every row of a Parquet table as a dict (plm-finetune's task files: a few MB at most)."""
    parquet = open_parquet(path, None)
    return parquet.read().to_pylist()
