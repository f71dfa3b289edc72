"""The checked reader of the files a user hands a command: task files (TSV, CSV, JSONL, SQuAD JSON, CoNLL),
plm-generate's prompts, plm-embed's sentences, parallel text, vocabulary files.

Every reader here applies the same rules, so that no reader silently reads something else than the file says:

- Only a regular file is opened: a FIFO, a device or a socket is refused before it is opened (opening a FIFO with
  no writer blocks for ever), a directory or a missing path is named as such.
- UTF-8 only; a byte that is not is named by its line. A UTF-8 byte-order mark at the start is dropped (and said
  once): editors on Windows write one, and it would otherwise become part of the first column's name or token.
- A line ends at ``\\n`` (a ``\\r`` before it is dropped), as ``wc -l`` and editors count lines. Python's
  ``str.splitlines`` also splits at U+2028, U+0085, form feeds and other separators, which made one line of a file
  several rows and moved every later row.
- JSON: a syntax error is named by line and column; text that is not Unicode (a lone surrogate such as
  ``"\\ud800"``, valid JSON that no tokenizer can encode) and NaN or Infinity (not JSON) are refused where they
  are; a JSONL row must be an object.
"""

from __future__ import annotations

import json
import logging
import math
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from plm_toolkit.core.errors import ConfigError, DataError

log = logging.getLogger("plm_toolkit")

BOM = "\ufeff"
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def not_a_file(path: str | Path) -> str | None:
    """Why ``path`` is not a regular file a reader may open ("no such file or directory", "a FIFO (named pipe)",
    ...), or None when it is one. Never opens it."""
    try:
        mode = os.stat(Path(path).expanduser()).st_mode
    except FileNotFoundError:
        return "no such file or directory"
    except OSError as err:
        return err.strerror or type(err).__name__
    if stat.S_ISREG(mode):
        return None
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


def regular_file(path: str | Path, key: str | None = None) -> Path:
    """``path`` (``~`` expanded) when it is a regular file; else DataError naming it (and the config key)."""
    path = Path(path).expanduser()
    reason = not_a_file(path)
    if reason is not None:
        where = f"{key}={path}" if key else str(path)
        raise DataError(f"{where}: {reason}; expected a regular file")
    return path


def output_file(path: str | Path, key: str) -> Path:
    """``path`` (``~`` expanded) checked as a file a command may write, before it does any work: not a folder, in a
    folder that exists or can be created, and that this user can write to; ConfigError naming ``key`` otherwise."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise ConfigError(f"{key}={path}: a directory; expected the name of a file to write")
    above = next(p for p in path.parents if p.exists())
    if not above.is_dir():
        raise ConfigError(f"{key}={path}: {above} is a file, not a folder; expected a file in a folder")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(handle)
        os.unlink(probe)
    except OSError as err:
        raise ConfigError(
            f"{key}={path}: cannot write into {path.parent} ({err.strerror or type(err).__name__}); give a file in a "
            "folder this user can write to"
        ) from None
    return path


def iter_lines(path: str | Path, key: str | None = None) -> Iterator[tuple[int, str]]:
    """(line number from 1, text without its line end) of every line of a UTF-8 file, read as it goes."""
    path = regular_file(path, key)
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                wanted = f"{key} must be UTF-8 text" if key else "expected UTF-8 text"
                raise DataError(f"{path}:{number}: not valid UTF-8 ({err.reason}); {wanted}") from None
            if number == 1 and line.startswith(BOM):
                log.info("%s starts with a UTF-8 byte-order mark; read without it", path)
                line = line[1:]
            yield number, line.removesuffix("\n").removesuffix("\r")


def read_text(path: str | Path, key: str | None = None) -> str:
    """The whole text of a UTF-8 file, a leading byte-order mark dropped; lines joined by ``\\n``."""
    return "".join(line + "\n" for _, line in iter_lines(path, key))


def surrogate_path(value: Any, where: str = "") -> str | None:
    """The place (``data[0].question``, ``text``) of the first string or key in a parsed JSON value that holds a
    lone surrogate, or None. Such a string is valid JSON but not Unicode text: encoding it fails later, far away."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return where or "the value"
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            found = surrogate_path(key, where or "a key") or surrogate_path(item, f"{where}.{key}" if where else key)
            if found:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = surrogate_path(item, f"{where}[{index}]")
            if found:
                return found
    return None


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def parse_json(text: str, path: Path, line: int | None = None) -> Any:
    """One JSON value; DataError naming file:line:column for a syntax error, NaN or Infinity, or a lone surrogate."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as err:
        where = f"{path}:{line}" if line is not None else f"{path}:{err.lineno}:{err.colno}"
        raise DataError(f"{where}: not valid JSON ({err.msg})") from None
    except ValueError as err:  # NaN, Infinity, -Infinity
        where = f"{path}:{line}" if line is not None else str(path)
        raise DataError(f"{where}: not valid JSON ({err}); write numbers as numbers") from None
    bad = surrogate_path(value)
    if bad:
        where = f"{path}:{line}" if line is not None else str(path)
        raise DataError(
            f"{where}: {bad!r} holds a lone surrogate escape (like \\ud800), which is not Unicode text; expected "
            "valid text (a character outside the basic plane is a pair, like \\ud83d\\ude00)"
        )
    return value


def read_json(path: str | Path, key: str | None = None) -> Any:
    """A whole JSON file, checked as ``parse_json`` does."""
    path = Path(path).expanduser()
    return parse_json(read_text(path, key), path)


def json_type(value: Any) -> str:
    """A JSON value's type in JSON's words (object, array, string, number, true/false, null)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return "a number"
    return {dict: "an object", list: "an array", str: "a string"}.get(type(value), type(value).__name__)


def iter_jsonl(path: str | Path, key: str | None = None) -> Iterator[tuple[int, dict]]:
    """(line number, object) of every non-blank line of a JSONL file; a line that is not a JSON object is refused."""
    path = Path(path).expanduser()
    for number, line in iter_lines(path, key):
        if not line.strip():
            continue
        row = parse_json(line, path, number)
        if not isinstance(row, dict):
            raise DataError(f"{path}:{number}: expected a JSON object (one per line), found {json_type(row)}")
        yield number, row


def scalar_text(value: Any, path: Path, line: int, name: str) -> str:
    """A JSON field read as text: a string as it is, a number as written, true/false in JSON's spelling. null, an
    array, an object or a non-finite number is refused, naming the row and the key."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
        return str(value)
    raise DataError(f"{path}:{line}: {name!r} is {json_type(value)}; expected a string or a number")
