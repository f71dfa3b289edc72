"""Parallel text for translation, read and checked: line-aligned files or JSONL.

Two formats, chosen per entry of ``data.train_files`` / ``data.validation_files``:
- a prefix: ``corpus/train`` reads ``corpus/train.en`` and ``corpus/train.de`` (``data.source_lang`` and
  ``data.target_lang`` appended), line i of one file translating line i of the other;
- a ``.jsonl`` file: one object per line with one key per language (``{"en": ..., "de": ...}``; other keys are
  ignored).

Checks: files of different line counts stop with both names and counts; a JSONL row without a language key stops
with file:line; a pair whose source or target is empty is skipped and counted in the log (translation has nothing to
learn from it). This module runs in the token store's worker processes (``data/store/translation_pair_worker.py``):
it imports neither torch nor datasets.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from plm_toolkit.core.errors import ConfigError, DataError
from plm_toolkit.data.sources.user_files import iter_lines, json_type, not_a_file, parse_json

log = logging.getLogger("plm_toolkit")

PAIRS = "one sentence per line, line-aligned with its translation"


@dataclass(frozen=True)
class ParallelSource:
    """One entry of data.train_files / data.validation_files, resolved to its file(s)."""

    spec: str
    # (source file, target file) of a prefix, or the one JSONL file twice.
    source_path: Path
    target_path: Path

    @property
    def jsonl(self) -> bool:
        return self.source_path == self.target_path


def resolve(spec: str, source_lang: str, target_lang: str, key: str = "data.train_files") -> ParallelSource:
    """The files an entry names, or DataError saying what was expected."""
    path = Path(os.path.expanduser(str(spec)))
    if path.suffix == ".jsonl":
        if not_a_file(path):
            raise DataError(
                f"{key}: {spec}: {not_a_file(path)}; expected a JSONL file with keys {source_lang!r} and "
                f"{target_lang!r}"
            )
        return ParallelSource(str(spec), path, path)
    stem = str(path) if str(path).endswith(".") else f"{path}."
    source, target = Path(stem + source_lang), Path(stem + target_lang)
    missing = [str(p) if not p.exists() else f"{p} ({not_a_file(p)})" for p in (source, target) if not_a_file(p)]
    if missing:
        hint = ""
        if path.is_file():
            hint = f" ({spec} is a file: give its prefix without the language suffix, or a .jsonl file)"
        raise DataError(
            f"{key}: {spec} is read as the prefix of {source.name} and {target.name} (data.source_lang="
            f"{source_lang}, data.target_lang={target_lang}); missing: {', '.join(missing)}{hint}"
        )
    return ParallelSource(str(spec), source, target)


@dataclass
class ReadCounts:
    pairs: int = 0
    # Pairs dropped because the source or the target line is empty.
    skipped_empty: int = 0


def _lines(path: Path) -> Iterator[str]:
    for _, line in iter_lines(path):
        yield line


def _aligned_lines(source: ParallelSource) -> Iterator[tuple[int, str, str]]:
    """(line number, source line, target line) of two line-aligned files; DataError when one is shorter."""
    src, tgt = _lines(source.source_path), _lines(source.target_path)
    number = 0
    for number, a in enumerate(src, start=1):  # noqa: B007 - the count is needed after the loop
        b = next(tgt, None)
        if b is None:
            rest = sum(1 for _ in src)
            raise DataError(
                f"{source.source_path} has {number + rest} lines but {source.target_path} has {number - 1}; "
                "parallel files must be line-aligned (line i of one translates line i of the other)"
            )
        yield number, a, b
    rest = sum(1 for _ in tgt)
    if rest:
        raise DataError(
            f"{source.source_path} has {number} lines but {source.target_path} has {number + rest}; "
            "parallel files must be line-aligned (line i of one translates line i of the other)"
        )


def jsonl_pairs(
    path: Path, lines: Iterable[tuple[int, str]], source_lang: str, target_lang: str
) -> Iterator[tuple[int, str, str]]:
    """(line number, source text, target text) of the (line number, line) of a JSONL file; DataError naming
    file:line for a bad row."""
    for number, line in lines:
        if not line.strip():
            continue
        row = parse_json(line, path, number)
        if not isinstance(row, dict):
            raise DataError(
                f"{path}:{number}: expected a JSON object with keys {source_lang!r} and {target_lang!r}, found "
                f"{json_type(row)}"
            )
        texts = []
        for lang, key in ((source_lang, "data.source_lang"), (target_lang, "data.target_lang")):
            if lang not in row:
                raise DataError(
                    f"{path}:{number}: no key {lang!r} ({key}); the row has {', '.join(map(repr, row)) or 'none'}"
                )
            if not isinstance(row[lang], str):
                raise DataError(f"{path}:{number}: {lang!r} is {json_type(row[lang])}; expected a string")
            texts.append(row[lang])
        yield number, texts[0], texts[1]


def iter_pairs(
    source: ParallelSource, source_lang: str, target_lang: str, counts: ReadCounts
) -> Iterator[tuple[str, str]]:
    """The (source, target) text pairs of one entry, stripped, without the pairs that have an empty side."""
    if source.jsonl:
        rows = jsonl_pairs(source.source_path, enumerate(_lines(source.source_path), 1), source_lang, target_lang)
    else:
        rows = _aligned_lines(source)
    for _, a, b in rows:
        a, b = a.strip(), b.strip()
        if not a or not b:
            counts.skipped_empty += 1
            continue
        counts.pairs += 1
        yield a, b


def report_counts(where: str, counts: ReadCounts) -> None:
    """Log the skipped pairs; DataError when nothing is left."""
    if counts.skipped_empty:
        total = counts.pairs + counts.skipped_empty
        log.warning(
            "%s: skipped %d of %d pairs with an empty source or target line", where, counts.skipped_empty, total
        )
    if counts.pairs == 0:
        raise DataError(f"{where}: no sentence pairs (every pair has an empty side)")


def check_languages(source_lang: str, target_lang: str) -> None:
    if not source_lang or not target_lang:
        raise ConfigError("data.source_lang and data.target_lang must be set (e.g. en and de)")
    if source_lang == target_lang:
        raise ConfigError(f"data.source_lang and data.target_lang are both {source_lang!r}; give two languages")
