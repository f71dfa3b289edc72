"""Where a corpus comes from, cut into pieces that worker processes read independently.

A split's sources are the entries of ``data.train_files`` / ``data.validation_files`` (files or glob patterns) or
``data.dataset_path`` (a folder written by ``datasets``' save_to_disk). A file is UTF-8 text (documents as
``data.document_boundary`` says, ``data/sources/documents.py``) or JSONL (``.jsonl``/``.json``: one document per row,
its text in the ``data.text_column`` field), either optionally compressed with gzip (``.gz``) or zstd (``.zst``,
``pip install 'plm_toolkit[zstd]'``), or Parquet (``.parquet``: one document per row in the ``data.text_column``
column, ``data/sources/parquet.py``).

Pieces: an uncompressed file is cut every ``data.shard_bytes`` bytes, each cut moved forward to the next document
boundary (a blank line, a line end, or none for whole-file documents), so that each piece holds whole documents
and the pieces together hold the file; a compressed file is one piece (it cannot be read from the middle); a saved
dataset is cut into row ranges; a Parquet file into runs of whole row groups. Reading a piece yields its documents
in order (``data/sources/piece_reader.py``).
"""

from __future__ import annotations

import codecs
import glob
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from plm_toolkit.core.errors import ConfigError, DataError
from plm_toolkit.data.sources.parquet import SUFFIXES as PARQUET_SUFFIXES
from plm_toolkit.data.sources.parquet import open_parquet, parquet_pieces
from plm_toolkit.data.sources.user_files import not_a_file

if TYPE_CHECKING:
    from plm_toolkit.core.data_schema import DataConfig

# Characters decoded (or bytes checked) at a time while reading a piece.
_CHUNK = 1 << 20
# Where a piece may end, as a byte pattern: after a line end that a blank line follows; after any line end.
_CUTS = {"blank_line": re.compile(rb"\n(?=[ \t\r\f\v]*\n)"), "line": re.compile(rb"\n")}
_COMPRESSION = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}


@dataclass(frozen=True)
class Source:
    """One input: a file (``text`` or ``jsonl``, maybe compressed; ``parquet``) or a saved dataset's split
    (``saved``)."""

    path: str
    format: str
    compression: str | None
    size: int
    mtime_ns: int
    # A saved dataset's split name and row count.
    subset: str | None = None
    rows: int = 0

    def stat(self) -> tuple[int, int]:
        """(size, modification time in ns) as the file system has them now."""
        if self.format == "saved":
            return _folder_stat(Path(self.path))
        info = os.stat(self.path)
        return info.st_size, info.st_mtime_ns

    def check_unchanged(self) -> None:
        """DataError naming the file when its size or modification time differs from when it was planned."""
        if self.stat() != (self.size, self.mtime_ns):
            raise DataError(
                f"corpus file {self.path} changed while the token store was prepared (size or modification time "
                "differ); the store is refused: prepare it again once the file is final"
            )

    def record(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Piece:
    """Bytes [start, end) of a file, or rows [start, end) of a saved dataset."""

    source: int
    start: int
    end: int


def no_text(source: Source, boundary: str, column: str) -> str:
    """The line for a source that gave no document, in the words of its format (``boundary``:
    data.document_boundary, ``column``: data.text_column)."""
    field = f"{column!r} (data.text_column)"
    if source.format == "parquet":
        metadata = open_parquet(source.path, None).metadata
        if metadata.num_rows == 0:
            return (
                f"Parquet file {source.path} holds no rows ({metadata.num_row_groups} row groups); expected one "
                f"document per row in column {field}"
            )
        return f"Parquet file {source.path} has no text: its {metadata.num_rows} row(s) are empty in column {field}"
    if source.format == "saved":
        return f"saved dataset {source.path} has no text: its {source.rows} row(s) are empty in column {field}"
    if source.format == "jsonl":
        return f"JSONL file {source.path} has no text; expected one JSON object a line with text in its field {field}"
    expected = {"blank_line": "documents separated by blank lines", "line": "one document per line",
                "file": "text"}[boundary]  # fmt: skip
    return f"corpus file {source.path} has no text; expected {expected}"


def _folder_stat(folder: Path) -> tuple[int, int]:
    files = [p for p in folder.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), max((p.stat().st_mtime_ns for p in files), default=0)


def source_problems(data_cfg: DataConfig) -> list[str]:
    """One message per training or validation entry that names no file (validation, before any work)."""
    out = []
    for key in ("train_files", "validation_files"):
        for entry in getattr(data_cfg, key):
            try:
                _expand(str(entry), f"data.{key}")
            except DataError as err:
                out.append(str(err))
    return out


def listed_files(entries, key: str) -> list[tuple[str, str]]:
    """(file, the entry that names it) for every file ``entries`` name, in order; an entry that names no file is
    ``source_problems``' to report."""
    out = []
    for entry in entries:
        try:
            out += [(path, str(entry)) for path in _expand(str(entry), key)]
        except DataError:
            continue
    return out


def _expand(entry: str, key: str) -> list[str]:
    path = os.path.expanduser(entry)
    if glob.has_magic(path):
        found = sorted(p for p in glob.glob(path, recursive=True) if os.path.isfile(p))
        if not found:
            raise DataError(f"{key}: the pattern {entry} matches no file")
        return found
    why = not_a_file(path)
    if why:
        raise DataError(
            f"{key}: {entry} is not a file ({why}); expected a text, JSONL, Parquet, .gz or .zst file or a pattern"
        )
    return [path]


def resolve_sources(data_cfg: DataConfig, split: str) -> list[Source] | None:
    """The sources of ``split`` ("train" or "validation"), or None when it has none (no validation: no
    evaluation); ConfigError when the training split has none."""
    if data_cfg.dataset_path:
        return _saved_source(data_cfg, split)
    key = "train_files" if split == "train" else "validation_files"
    entries = [str(e) for e in (getattr(data_cfg, key) or [])]
    if not entries:
        if split == "train":
            raise ConfigError(
                "data.train_files is empty; give data.train_files=[a.txt,...] or data.dataset_path=<folder>"
            )
        return None
    sources, seen = [], {}
    for entry in entries:
        for path in _expand(entry, f"data.{key}"):
            if os.path.realpath(path) in seen:  # read twice, the file would count twice in the corpus
                raise DataError(
                    f"data.{key}: {path} is listed twice (by {seen[os.path.realpath(path)]!r} and {entry!r}); list "
                    "each file once (to weight a file, copy it under another name)"
                )
            seen[os.path.realpath(path)] = entry
            name = Path(path)
            compression = _COMPRESSION.get(name.suffix.lower())
            inner = Path(name.stem).suffix.lower() if compression else name.suffix.lower()
            info = name.stat()
            kind = "jsonl" if inner in (".jsonl", ".json") else "text"
            if name.suffix.lower() in PARQUET_SUFFIXES:  # checked now: a readable footer, a text column
                open_parquet(path, str(data_cfg.text_column))
                kind = "parquet"
            sources.append(Source(os.path.abspath(name), kind, compression, info.st_size, info.st_mtime_ns))
    return sources


def _saved_source(data_cfg: DataConfig, split: str) -> list[Source] | None:
    from plm_toolkit.data.sources.saved_datasets import open_saved_split  # datasets: only where one is read

    path = Path(os.path.expanduser(str(data_cfg.dataset_path)))
    found = open_saved_split(path, split, data_cfg.text_column)
    if found is None:
        return None
    subset, dataset = found
    size, mtime = _folder_stat(path)
    return [Source(str(path.resolve()), "saved", None, size, mtime, subset, len(dataset))]


def shard_size(sources: list[Source], wanted: int | None) -> int:
    """``wanted`` (data.shard_bytes), else a 64th of the sources' bytes between 1 MB and 64 MB."""
    if wanted:
        return int(wanted)
    return min(max(sum(s.size for s in sources) // 64, 1 << 20), 64_000_000)


def plan_pieces(sources: list[Source], shard_bytes: int | None, boundary: str) -> list[Piece]:
    """The pieces of every source, in corpus order (the same whatever the number of worker processes)."""
    shard_bytes = shard_size(sources, shard_bytes)
    pieces = []
    for number, source in enumerate(sources):
        if source.format == "saved":
            rows_per_piece = max(1, source.rows * shard_bytes // max(source.size, 1))
            pieces += [
                Piece(number, a, min(a + rows_per_piece, source.rows)) for a in range(0, source.rows, rows_per_piece)
            ]
            continue
        if source.format == "parquet":
            pieces += [Piece(number, a, b) for a, b in parquet_pieces(source.path, shard_bytes)]
            continue
        if source.compression or (source.format == "text" and boundary == "file"):
            pieces.append(Piece(number, 0, source.size))
            continue
        cut = _CUTS["line" if source.format == "jsonl" else boundary]
        start = 0
        with open(source.path, "rb") as f:
            while start < source.size:
                end = _next_cut(f, start + shard_bytes, cut, source.size)
                pieces.append(Piece(number, start, end))
                start = end
    return pieces


def _next_cut(f, position: int, cut: re.Pattern, size: int) -> int:
    """The first position at or after ``position`` where a piece may end (just after a matching line end)."""
    if position >= size:
        return size
    f.seek(max(position - 1, 0))
    carry = b""
    offset = max(position - 1, 0)
    while block := f.read(1 << 16):
        data = carry + block
        for match in cut.finditer(data):
            if offset - len(carry) + match.end() >= position:
                return offset - len(carry) + match.end()
        carry = data[-64:]  # a blank line of trailing whitespace may straddle two blocks
        offset += len(block)
    return size


def scan_text(stream, path: str | Path, line: int = 1, digest=None) -> bool:
    """Read a binary stream to its end; whether it holds non-blank text. Raises DataError naming ``path`` and the
    line (counted from ``line``) at a NUL byte (a binary file) or a byte sequence that is not UTF-8."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    has_text = False
    while chunk := stream.read(_CHUNK):
        if digest is not None:
            digest.update(chunk)
        nul = chunk.find(b"\x00")
        if nul >= 0:
            where = line + chunk.count(b"\n", 0, nul)
            raise DataError(f"{path}:{where}: NUL byte, this looks like a binary file; expected UTF-8 text")
        try:
            text = decoder.decode(chunk)
        except UnicodeDecodeError as e:
            # The bad byte's offset counts from the undecoded tail carried over from the last chunk.
            pending = len(decoder.getstate()[0])
            where = line + chunk.count(b"\n", 0, max(e.start - pending, 0))
            raise DataError(f"{path}:{where}: not valid UTF-8 ({e.reason}); expected UTF-8 text") from None
        has_text = has_text or bool(text.strip())
        line += chunk.count(b"\n")
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        raise DataError(f"{path}:{line}: ends inside a UTF-8 character; expected UTF-8 text") from None
    return has_text
