"""Where a corpus comes from, cut into pieces that worker processes read independently.

A split's sources are the entries of ``data.train_files`` / ``data.validation_files`` (files or glob patterns) or
``data.dataset_path`` (a folder written by ``datasets``' save_to_disk). A file is UTF-8 text (documents as
``data.document_boundary`` says, ``data/documents.py``) or JSONL (``.jsonl``/``.json``: one document per row, its
text in the ``data.text_column`` field), either optionally compressed with gzip (``.gz``) or zstd (``.zst``,
``pip install 'plm_toolkit[zstd]'``).

Pieces: an uncompressed file is cut every ``data.shard_bytes`` bytes, each cut moved forward to the next document
boundary (a blank line, a line end, or none for whole-file documents), so that each piece holds whole documents
and the pieces together hold the file; a compressed file is one piece (it cannot be read from the middle); a saved
dataset is cut into row ranges. Reading a piece yields its documents in order.
"""

from __future__ import annotations

import codecs
import glob
import gzip
import io
import json
import os
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from plm_toolkit.data.documents import split_text
from plm_toolkit.errors import ConfigError, DataError

# Characters decoded (or bytes checked) at a time while reading a piece.
_CHUNK = 1 << 20
# A document longer than this is tokenized in fragments cut after a line end (the tokens of a fragment go on in
# the same document), so that a whole-file document does not hold its file in memory at once.
FRAGMENT = 1 << 23
# Where a piece may end, as a byte pattern: after a line end that a blank line follows; after any line end.
_CUTS = {"blank_line": re.compile(rb"\n(?=[ \t\r\f\v]*\n)"), "line": re.compile(rb"\n")}
_FRAGMENT_END = re.compile(r"\n(?=\S)")
_COMPRESSION = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}


@dataclass(frozen=True)
class Source:
    """One input: a file (``text`` or ``jsonl``, maybe compressed) or a saved dataset's split (``saved``)."""

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


def _folder_stat(folder: Path) -> tuple[int, int]:
    files = [p for p in folder.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), max((p.stat().st_mtime_ns for p in files), default=0)


def source_problems(data_cfg: Any) -> list[str]:
    """One message per training or validation entry that names no file (validation, before any work)."""
    out = []
    for key in ("train_files", "validation_files"):
        for entry in getattr(data_cfg, key):
            try:
                _expand(str(entry), f"data.{key}")
            except DataError as err:
                out.append(str(err))
    return out


def _expand(entry: str, key: str) -> list[str]:
    path = os.path.expanduser(entry)
    if glob.has_magic(path):
        found = sorted(p for p in glob.glob(path, recursive=True) if os.path.isfile(p))
        if not found:
            raise DataError(f"{key}: the pattern {entry} matches no file")
        return found
    if not os.path.isfile(path):
        what = " (a directory)" if os.path.isdir(path) else ""
        raise DataError(f"{key}: {entry} is not a file{what}; expected a text, JSONL, .gz or .zst file or a pattern")
    return [path]


def resolve_sources(data_cfg: Any, split: str) -> list[Source] | None:
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
    sources = []
    for entry in entries:
        for path in _expand(entry, f"data.{key}"):
            name = Path(path)
            compression = _COMPRESSION.get(name.suffix.lower())
            inner = Path(name.stem).suffix.lower() if compression else name.suffix.lower()
            info = name.stat()
            sources.append(Source(os.path.abspath(name), "jsonl" if inner in (".jsonl", ".json") else "text",
                                  compression, info.st_size, info.st_mtime_ns))  # fmt: skip
    return sources


def _saved_source(data_cfg: Any, split: str) -> list[Source] | None:
    from plm_toolkit.data.corpus import open_saved_split  # datasets: imported where a saved dataset is read only

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


def locate_text_error(path: str, start: int, end: int, compression: str | None) -> DataError:
    """The DataError (file and line) for bytes [start, end) of a file that did not read as UTF-8 text: read again
    from the file's start to find the line (only ever on the way to an error)."""
    import gzip

    with open(path, "rb") as raw:
        stream = gzip.GzipFile(fileobj=raw) if compression == "gzip" else raw
        if compression == "zstd":
            stream = zstd_module().ZstdDecompressor().stream_reader(raw, read_across_frames=True)
        try:
            scan_text(stream, path)
        except DataError as err:
            return err
    return DataError(f"{path}: bytes {start} to {end} do not read as UTF-8 text")


# --- reading a piece ----------------------------------------------------------------------------------------


class _Range(io.RawIOBase):
    """Bytes [start, end) of an open binary file, read sequentially."""

    def __init__(self, raw, start: int, end: int):
        self.raw, self.left = raw, end - start
        raw.seek(start)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self.left <= 0:
            return 0
        view = memoryview(buffer)[: min(len(buffer), self.left)]
        count = self.raw.readinto(view)
        self.left -= count or 0
        return count or 0


class _Hashed(io.RawIOBase):
    """A binary file that adds every byte read from it to ``digest``."""

    def __init__(self, raw, digest):
        self.raw, self.digest = raw, digest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        count = self.raw.readinto(buffer) or 0
        self.digest.update(memoryview(buffer)[:count])
        return count

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.digest.update(data)
        return data

    def seek(self, position: int, whence: int = 0) -> int:
        return self.raw.seek(position, whence)

    def tell(self) -> int:
        return self.raw.tell()


def read_piece(
    source: Source, piece: Piece, boundary: str, text_column: str, progress: Callable[[int], None], digest=None
) -> Iterator[tuple[str, bool]]:
    """(text, ends) in corpus order: a document, or a fragment of one with ``ends`` False where it goes on in the
    next. ``progress(done)`` reports how many of the piece's bytes (compressed bytes; a saved dataset's share of
    its size) have been read; ``digest`` (a hashlib object) gets the piece's bytes as read."""
    if source.format == "saved":
        yield from _saved_documents(source, piece, boundary, text_column, progress)
        return
    with open(source.path, "rb") as opened:
        raw = _Hashed(opened, digest) if digest is not None else opened
        stream = _decompressed(source, raw, piece)
        try:
            if source.format == "jsonl":
                yield from _jsonl_documents(source, piece, stream, text_column, raw, progress)
            else:
                yield from _text_documents(source, piece, stream, boundary, raw, progress)
        except (OSError, EOFError, zlib.error) as err:
            if source.compression is None or isinstance(err, (FileNotFoundError, PermissionError)):
                raise
            raise DataError(
                f"{source.path}: corrupt {source.compression} data near compressed byte offset {raw.tell()} ({err})"
            ) from None
        except Exception as err:
            if type(err).__name__ != "ZstdError":
                raise
            raise DataError(
                f"{source.path}: corrupt zstd data near compressed byte offset {raw.tell()} ({err})"
            ) from None


def _decompressed(source: Source, raw, piece: Piece):
    if source.compression == "gzip":
        return io.BufferedReader(gzip.GzipFile(fileobj=raw, mode="rb"), 1 << 16)
    if source.compression == "zstd":
        return io.BufferedReader(zstd_module().ZstdDecompressor().stream_reader(raw, read_across_frames=True), 1 << 16)
    return io.BufferedReader(_Range(raw, piece.start, piece.end), 1 << 16)


def zstd_module():
    """The ``zstandard`` package, imported on first use (an optional extra)."""
    try:
        import zstandard
    except ImportError:
        raise ConfigError("reading .zst files needs the zstandard package: pip install 'plm_toolkit[zstd]'") from None
    return zstandard


def _text_documents(source: Source, piece: Piece, stream, boundary: str, raw, progress) -> Iterator[tuple[str, bool]]:
    text_stream = io.TextIOWrapper(stream, encoding="utf-8", newline=None)  # universal newlines, as open() reads
    separator = re.compile(r"\n(?:[^\S\n]*\n)+") if boundary == "blank_line" else None
    carry = ""
    lines = 0
    while True:
        try:
            chunk = text_stream.read(_CHUNK)
        except UnicodeDecodeError:
            raise locate_text_error(source.path, piece.start, piece.end, source.compression) from None
        if "\x00" in chunk:
            raise locate_text_error(source.path, piece.start, piece.end, source.compression)
        progress(raw.tell() - piece.start)
        if not chunk:
            break
        lines += chunk.count("\n")
        text = carry + chunk
        if boundary == "file":
            carry = yield from _fragments(text)
            continue
        if separator is not None:
            last = None
            for last in separator.finditer(text):  # noqa: B007 - the last match is wanted
                pass
            cut = last.end() if last else 0
        else:
            cut = text.rfind("\n") + 1
        for document in split_text(text[:cut], boundary):
            yield document, True
        carry = yield from _fragments(text[cut:])
    for document in split_text(carry, boundary):
        yield document, True


def _fragments(text: str):
    """Yield (fragment, False) from the front of an unfinished document longer than FRAGMENT; returns the rest. A
    fragment ends after a line end that a non-blank character follows, where a tokenizer's pre-tokenizer splits
    the text anyway (else at FRAGMENT characters)."""
    while len(text) > FRAGMENT:
        cut = next((m.end() for m in _FRAGMENT_END.finditer(text, FRAGMENT // 2, FRAGMENT)), FRAGMENT)
        yield text[:cut], False
        text = text[cut:]
    return text


def _jsonl_documents(source: Source, piece: Piece, stream, column: str, raw, progress) -> Iterator[tuple[str, bool]]:
    for number, line in enumerate(stream):
        if number % 1024 == 0:
            progress(raw.tell() - piece.start)
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as err:
            where = _line_of(source, piece, number)
            raise DataError(f"{where}: not a JSON object ({err}); expected one document per line") from None
        if not isinstance(row, dict) or column not in row:
            keys = sorted(row) if isinstance(row, dict) else type(row).__name__
            where = _line_of(source, piece, number)
            raise DataError(f"{where}: no {column!r} field (data.text_column) in the row; it has {keys}")
        text = row[column]
        if not isinstance(text, str):
            where = _line_of(source, piece, number)
            raise DataError(f"{where}: field {column!r} holds {type(text).__name__}, not text")
        if text.strip():
            yield text, True
    progress(raw.tell() - piece.start)


def _line_of(source: Source, piece: Piece, number: int) -> str:
    """``path:line`` of the piece's line ``number`` (from 0), for a message."""
    before = 0 if source.compression else _lines_before(source.path, piece.start)
    return f"{source.path}:{before + number + 1}"


def _lines_before(path: str, position: int) -> int:
    count = 0
    with open(path, "rb") as f:
        while position > 0 and (block := f.read(min(1 << 20, position))):
            count += block.count(b"\n")
            position -= len(block)
    return count


def _saved_documents(source: Source, piece: Piece, boundary: str, column: str, progress) -> Iterator[tuple[str, bool]]:
    from plm_toolkit.data.corpus import open_saved_split  # datasets: imported where a saved dataset is read only

    _, dataset = open_saved_split(Path(source.path), source.subset, column)
    rows = dataset.select_columns([column]).select(range(piece.start, piece.end))
    done = 0
    for batch in rows.iter(batch_size=1000):
        for text in batch[column]:
            for document in split_text(text or "", boundary):
                yield document, True
        done += len(batch[column])
        progress(done * source.size // max(source.rows, 1))


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
