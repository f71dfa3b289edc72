"""Names against the names that exist: the closest one to suggest for a misspelling, and the keys a typed config
node accepts. Used by config validation and by the command line's error lines."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import fields, is_dataclass


def did_you_mean(word: str, choices: Iterable[str], prefix: str = "") -> str:
    """``; did you mean X?`` for the closest choice (difflib), or nothing when none is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {prefix}{close[0]}?" if close else ""


def key_names(object_type) -> list[str]:
    """The keys a typed config node accepts (the fields of its dataclass)."""
    return [f.name for f in fields(object_type)] if is_dataclass(object_type) else []
