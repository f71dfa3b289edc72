"""Parallel text for translation: line-aligned files or JSONL, read, checked, cached and tokenized.

Two formats, chosen per entry of ``data.train_files`` / ``data.validation_files``:
- a prefix: ``corpus/train`` reads ``corpus/train.en`` and ``corpus/train.de`` (``data.source_lang`` and
  ``data.target_lang`` appended), line i of one file translating line i of the other;
- a ``.jsonl`` file: one object per line with one key per language (``{"en": ..., "de": ...}``; other keys are
  ignored).

Checks: files of different line counts stop with both names and counts; a JSONL row without a language key stops
with file:line; a pair whose source or target is empty is skipped and counted in the log (translation has nothing to
learn from it). Two cached steps, keyed on the files' contents and the settings, as for pretraining data:
``<cache_dir>/parallel/<key>.arrow`` holds the text pairs (``source``, ``target``), ``<cache_dir>/parallel/<key>.ids
.arrow`` their token ids (no special tokens), with sentences longer than ``data.max_seq_len - 1`` tokens cut to it
and counted in a warning (one position is left for the end-of-sentence token the collator adds).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
from tokenizers import Tokenizer

from plm_toolkit.data.corpus import Documents, cache_root, check_text_file, stable_hash
from plm_toolkit.data.token_batches import TokenBatches, token_batches
from plm_toolkit.data.tokenizer import load_or_train_tokenizer, vocab_from_tokenizer
from plm_toolkit.data.user_files import iter_jsonl, iter_lines, json_type, not_a_file
from plm_toolkit.data.vocab import Vocab
from plm_toolkit.errors import ConfigError, DataError

log = logging.getLogger("plm_toolkit")

# Bump when a change here changes what the cached files hold.
FORMAT_VERSION = 2
_ROWS = 2000  # pairs per written record batch / tokenizer call
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


def _jsonl_pairs(source: ParallelSource, source_lang: str, target_lang: str) -> Iterator[tuple[int, str, str]]:
    """(line number, source text, target text) of a JSONL file; DataError naming file:line for a bad row."""
    path = source.source_path
    for number, row in iter_jsonl(path):
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
    rows = _jsonl_pairs(source, source_lang, target_lang) if source.jsonl else _aligned_lines(source)
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


def _write_arrow(path: Path, schema: pa.Schema, batches: Iterator[dict[str, list]]) -> None:
    """Write record batches to ``path`` through a temporary file and a rename (readers never see half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with pa.OSFile(str(temporary), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
        for columns in batches:
            writer.write_batch(pa.record_batch([pa.array(columns[f.name], f.type) for f in schema], schema))
    os.replace(temporary, path)


def read_parallel(data_cfg: Any, split: str) -> datasets.Dataset | None:
    """The text pairs (columns ``source``, ``target``) of ``split`` ("train" or "validation"), or None when the
    split has no files. Cached; the skipped-pair count is logged on every run."""
    specs = [str(s) for s in (data_cfg.train_files if split == "train" else data_cfg.validation_files) or []]
    key = "data.train_files" if split == "train" else "data.validation_files"
    if not specs:
        if split == "train":
            raise ConfigError("data.train_files is empty; give data.train_files=[corpus/train] (or a .jsonl file)")
        return None
    src_lang, tgt_lang = str(data_cfg.source_lang), str(data_cfg.target_lang)
    check_languages(src_lang, tgt_lang)
    sources = [resolve(s, src_lang, tgt_lang, key) for s in specs]
    hashes = [[check_text_file(p, PAIRS) for p in dict.fromkeys((s.source_path, s.target_path))] for s in sources]
    name = stable_hash("parallel", hashes, src_lang, tgt_lang, FORMAT_VERSION)
    path = cache_root(data_cfg) / "parallel" / f"{name}.arrow"
    counts_path = path.with_suffix(".json")
    if not (path.is_file() and counts_path.is_file()):
        counts = ReadCounts()

        def batches():
            rows: dict[str, list] = {"source": [], "target": []}
            for source in sources:
                for a, b in iter_pairs(source, src_lang, tgt_lang, counts):
                    rows["source"].append(a)
                    rows["target"].append(b)
                    if len(rows["source"]) == _ROWS:
                        yield rows
                        rows = {"source": [], "target": []}
            yield rows

        _write_arrow(path, pa.schema([("source", pa.string()), ("target", pa.string())]), batches())
        counts_path.write_text(json.dumps(vars(counts)))
    report_counts(", ".join(specs), ReadCounts(**json.loads(counts_path.read_text())))
    return datasets.Dataset.from_file(str(path))


def joint_text(pairs: datasets.Dataset) -> datasets.Dataset:
    """Both sides of the pairs as one ``text`` column: what a joint source-target vocabulary is trained on."""
    sides = [pairs.select_columns([c]).rename_column(c, "text") for c in ("source", "target")]
    return datasets.concatenate_datasets(sides)


@dataclass
class TruncationCounts:
    source: int = 0
    target: int = 0


def tokenize_pairs(
    pairs: datasets.Dataset, tokenizer: Tokenizer, max_seq_len: int, data_cfg: Any, split: str
) -> datasets.Dataset:
    """Token ids of both sides (``source_ids``, ``target_ids``, no special tokens) and the row ``index``.

    A side longer than ``max_seq_len - 1`` tokens is cut to that length (one position stays for the end-of-sentence
    or start token the collator adds) and counted in a warning. Cached next to the text pairs.
    """
    limit = max_seq_len - 1
    name = stable_hash(Path(pairs.cache_files[0]["filename"]).stem, tokenizer.to_str(), limit, FORMAT_VERSION)
    path = cache_root(data_cfg) / "parallel" / f"{name}.ids.arrow"
    counts_path = path.with_suffix(".json")
    if not (path.is_file() and counts_path.is_file()):
        counts = TruncationCounts()

        def batches():
            for start in range(0, len(pairs), _ROWS):
                chunk = pairs[start : start + _ROWS]
                out: dict[str, list] = {"index": list(range(start, start + len(chunk["source"])))}
                for side in ("source", "target"):
                    ids = [e.ids for e in tokenizer.encode_batch(chunk[side], add_special_tokens=False)]
                    long = sum(len(i) > limit for i in ids)
                    setattr(counts, side, getattr(counts, side) + long)
                    out[f"{side}_ids"] = [i[:limit] for i in ids]
                yield out

        schema = pa.schema(
            [("index", pa.int64()), ("source_ids", pa.list_(pa.int32())), ("target_ids", pa.list_(pa.int32()))]
        )
        _write_arrow(path, schema, batches())
        counts_path.write_text(json.dumps(vars(counts)))
    counts = TruncationCounts(**json.loads(counts_path.read_text()))
    if counts.source or counts.target:
        log.warning(
            "%s split: cut %d source and %d target sentences of %d pairs to %d tokens (data.max_seq_len=%d minus "
            "the end-of-sentence token); raise data.max_seq_len (at most model.max_position_embeddings) to keep them",
            split,
            counts.source,
            counts.target,
            len(pairs),
            limit,
            max_seq_len,
        )
    return datasets.Dataset.from_file(str(path))


@dataclass
class ParallelData:
    tokenizer: Tokenizer
    vocab: Vocab
    # Token batches of training pairs (rows: index, source_ids, target_ids).
    train: TokenBatches
    # Token batches of validation pairs, or None without validation files.
    validation: TokenBatches | None
    # The validation pairs' text as read (stripped), by row index: decoding is scored against ``references``.
    sources: list[str]
    references: list[str]


def batches_of(ids: datasets.Dataset, data_cfg: Any, seed: int) -> TokenBatches:
    """Token batches over tokenized pairs; lengths count the end or start token each side gets."""
    lengths = ids.with_format("arrow").select_columns(["source_ids", "target_ids"]).data
    src = pa.compute.list_value_length(lengths.column("source_ids")).to_numpy() + 1
    tgt = pa.compute.list_value_length(lengths.column("target_ids")).to_numpy() + 1
    batches = token_batches(src, tgt, int(data_cfg.max_tokens), seed, int(data_cfg.max_sentences))
    return TokenBatches(ids, batches)


def prepare_parallel_data(data_cfg: Any, seed: int) -> ParallelData:
    """Text pairs read and checked, a joint vocabulary loaded or trained on both sides of the training pairs,
    token ids (cut to data.max_seq_len) grouped into batches of about data.max_tokens tokens; all cached."""
    if int(data_cfg.max_tokens) < int(data_cfg.max_seq_len):
        raise ConfigError(
            f"data.max_tokens={data_cfg.max_tokens} is below data.max_seq_len={data_cfg.max_seq_len}: a batch must "
            "hold at least one sentence of the longest length"
        )
    train_pairs = read_parallel(data_cfg, "train")
    assert train_pairs is not None  # read_parallel raises when there are no training files
    stem = Path(train_pairs.cache_files[0]["filename"]).stem
    joint = Documents(joint_text(train_pairs), stable_hash("parallel", stem), ", ".join(data_cfg.train_files))
    tokenizer = load_or_train_tokenizer(data_cfg, joint)
    vocab = vocab_from_tokenizer(tokenizer)
    max_seq_len = int(data_cfg.max_seq_len)
    train = batches_of(tokenize_pairs(train_pairs, tokenizer, max_seq_len, data_cfg, "train"), data_cfg, seed)
    validation, sources, references = None, [], []
    validation_pairs = read_parallel(data_cfg, "validation")
    if validation_pairs is not None:
        ids = tokenize_pairs(validation_pairs, tokenizer, max_seq_len, data_cfg, "validation")
        validation = batches_of(ids, data_cfg, seed)
        sources, references = validation_pairs["source"], validation_pairs["target"]
    log.info(
        "parallel data: %d training pairs in %d batches of <= %d tokens per side; %d validation pairs",
        train.num_rows(),
        len(train),
        int(data_cfg.max_tokens),
        len(references),
    )
    return ParallelData(tokenizer, vocab, train, validation, sources, references)
