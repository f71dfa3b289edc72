"""Text and JSONL corpus files as written, plain or compressed with gzip or zstd: a piece read as a stream of
documents (text cut into documents as ``data.document_boundary`` says, JSONL one row each), hashing the bytes as
they are read. A document longer than FRAGMENT characters comes in fragments, so that nothing holds a whole file in
memory. Errors name the file and the line (or the compressed offset).
"""

from __future__ import annotations

import codecs
import gzip
import io
import json
import re
import zlib
from collections.abc import Callable, Iterator

from plm_toolkit.core.errors import ConfigError, DataError
from plm_toolkit.data.sources.documents import split_text
from plm_toolkit.data.sources.pieces import _CHUNK, Piece, Source, scan_text
from plm_toolkit.data.sources.zstd_frames import ZstdFrames

# A document longer than this is tokenized in fragments cut after a line end (the tokens of a fragment go on in
# the same document), so that a whole-file document does not hold its file in memory at once. The tokenizer's
# output for one text takes about 150 bytes a character: 2 GB for a fragment of 8M characters (one 50 MB line), 40 MB
# for one of 256K.
FRAGMENT = 1 << 18
_FRAGMENT_END = re.compile(r"\n(?=\S)")
# Where a fragment may end in a long line: before a single space between two words, where every pre-tokenizer we
# use (whitespace, byte-level BPE's " word" pieces, the Metaspace of unigram) splits anyway.
_WORD_END = re.compile(r"(?<=\S)(?= \S)")


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


def text_file_documents(
    source: Source, piece: Piece, boundary: str, column: str, progress: Callable[[int], None], digest=None
) -> Iterator[tuple[str, bool]]:
    """(text, ends) of a piece of a text or JSONL file, through gzip or zstd where it is compressed; ``progress``
    gets the compressed bytes read, ``digest`` the bytes as read (``read_piece``)."""
    with open(source.path, "rb") as opened:
        raw = _Hashed(opened, digest) if digest is not None else opened
        stream = _decompressed(source, raw, piece)
        try:
            if source.format == "jsonl":
                yield from _jsonl_documents(source, piece, stream, column, raw, progress)
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
        return io.BufferedReader(ZstdFrames(zstd_module(), raw), 1 << 16)
    return io.BufferedReader(_Range(raw, piece.start, piece.end), 1 << 16)


def zstd_module():
    """The ``zstandard`` package, imported on first use (an optional extra)."""
    try:
        import zstandard
    except ImportError:
        raise ConfigError("reading .zst files needs the zstandard package: pip install 'plm_toolkit[zstd]'") from None
    return zstandard


def _text_documents(source: Source, piece: Piece, stream, boundary: str, raw, progress) -> Iterator[tuple[str, bool]]:
    # Universal newlines, as open() reads; a byte-order mark at the file's start dropped, as the task readers do.
    encoding = "utf-8-sig" if piece.start == 0 else "utf-8"
    text_stream = io.TextIOWrapper(stream, encoding=encoding, newline=None)
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
    fragment ends after a line end that a non-blank character follows, or before a space between two words, where
    a tokenizer's pre-tokenizer splits the text anyway (else at FRAGMENT characters)."""
    while len(text) > FRAGMENT:
        cut = next((m.end() for m in _FRAGMENT_END.finditer(text, FRAGMENT // 2, FRAGMENT)), None)
        if cut is None:  # a long line: between two words, else (a run of 128K characters without a space) anywhere
            cut = next((m.end() for m in _WORD_END.finditer(text, FRAGMENT // 2, FRAGMENT)), FRAGMENT)
        yield text[:cut], False
        text = text[cut:]
    return text


def _jsonl_documents(source: Source, piece: Piece, stream, column: str, raw, progress) -> Iterator[tuple[str, bool]]:
    for number, line in enumerate(stream):
        if number % 1024 == 0:
            progress(raw.tell() - piece.start)
        if number == 0 and piece.start == 0:
            line = line.removeprefix(codecs.BOM_UTF8)
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


def locate_text_error(path: str, start: int, end: int, compression: str | None) -> DataError:
    """The DataError (file and line) for bytes [start, end) of a file that did not read as UTF-8 text: read again
    from the file's start to find the line (only ever on the way to an error)."""
    with open(path, "rb") as raw:
        stream = gzip.GzipFile(fileobj=raw) if compression == "gzip" else raw
        if compression == "zstd":
            stream = ZstdFrames(zstd_module(), raw)
        try:
            scan_text(stream, path)
        except DataError as err:
            return err
    return DataError(f"{path}: bytes {start} to {end} do not read as UTF-8 text")
