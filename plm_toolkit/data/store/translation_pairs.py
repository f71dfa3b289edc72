"""Parallel text in a token store: every sentence pair a document of two sentences (the source's ids, then the
target's), written by worker processes shard by shard as the monolingual stores are (``data/store/preparation.py``), and
read back pair by pair (``data/layouts/translation_pairs.py``, ``ParallelPairs``) without loading the corpus.

Each entry of data.train_files / data.validation_files (a prefix of two line-aligned files, or a JSONL file) is cut
into pieces of about data.shard_bytes of its source file, each cut after a line; a prefix's target file is cut after
the same lines (one pass over it, which also checks that both files have as many lines). A pair with an empty side
is skipped and counted in the shard's header. Ids are kept whole: ``ParallelPairs`` cuts them to data.max_seq_len - 1
when it reads them, so one store serves every length.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf
from tokenizers import Tokenizer

from plm_toolkit.core.atomic import write_text
from plm_toolkit.core.cache import cache_root, stable_hash
from plm_toolkit.core.errors import ConfigError, DataError
from plm_toolkit.data.sources.corpus import SPLITS, check_text_file
from plm_toolkit.data.sources.parallel_text import (
    PAIRS,
    ParallelSource,
    ReadCounts,
    check_languages,
    iter_pairs,
    resolve,
)
from plm_toolkit.data.sources.pieces import Source
from plm_toolkit.data.store.check import file_sha256
from plm_toolkit.data.store.preparation import (
    PLAN,
    TOKENIZER,
    finished_store,
    read_plan,
    resumed_store,
    run_jobs,
)
from plm_toolkit.data.store.processes import available_cores
from plm_toolkit.data.store.settings import tokenizer_settings
from plm_toolkit.data.store.token_store import (
    MANIFEST,
    Shard,
    TokenStore,
    id_dtype,
    write_json,
)
from plm_toolkit.data.store.translation_pair_worker import start_pairs, tokenize_pairs_piece
from plm_toolkit.data.tokenization.tokenizer import load_tokenizer, train_cached

if TYPE_CHECKING:
    from plm_toolkit.core.data_schema import DataConfig

log = logging.getLogger("plm_toolkit")

# Bump when a change here or in data/store/translation_pair_worker.py changes what a store of pairs holds.
PAIRS_VERSION = 1


def parallel_entries(data_cfg: DataConfig, split: str) -> list[ParallelSource] | None:
    """The entries of ``split`` resolved to their files, or None when it has none."""
    specs = [str(s) for s in (data_cfg.train_files if split == "train" else data_cfg.validation_files) or []]
    if not specs:
        if split == "train":
            raise ConfigError("data.train_files is empty; give data.train_files=[corpus/train] (or a .jsonl file)")
        return None
    source_lang, target_lang = str(data_cfg.source_lang), str(data_cfg.target_lang)
    check_languages(source_lang, target_lang)
    key = "data.train_files" if split == "train" else "data.validation_files"
    entries = [resolve(spec, source_lang, target_lang, key) for spec in specs]
    seen: dict[str, str] = {}
    for spec, entry in zip(specs, entries, strict=True):  # read twice, the pairs would count twice
        where = os.path.realpath(entry.source_path)
        if where in seen:
            raise DataError(f"{key}: {spec} is listed twice (as {seen[where]!r} and {spec!r}); list each corpus once")
        seen[where] = spec
    return entries


def _files(entry: ParallelSource) -> list[Source]:
    paths = dict.fromkeys((entry.source_path, entry.target_path))
    return [Source(str(p), "text", None, os.stat(p).st_size, os.stat(p).st_mtime_ns) for p in paths]


def _located(data_cfg: DataConfig) -> tuple[dict, dict, dict, Path, bool]:
    """The entries of each split, the store's settings, the files' records, its folder, whether data.store gave it."""
    splits = {split: parallel_entries(data_cfg, split) for split in SPLITS}
    settings = {"version": PAIRS_VERSION, "unit": "pairs", "source_lang": str(data_cfg.source_lang),
                "target_lang": str(data_cfg.target_lang), "tokenizer": tokenizer_settings(data_cfg)}  # fmt: skip
    records = {split: [f.record() for e in entries for f in _files(e)] for split, entries in splits.items() if entries}
    explicit = bool(getattr(data_cfg, "store", None))
    if explicit:
        folder = Path(os.path.expanduser(str(data_cfg.store)))
    else:
        folder = cache_root(data_cfg) / "stores" / stable_hash(settings, records)
    return splits, settings, records, folder, explicit


def prepare_parallel_store(data_cfg: DataConfig) -> Path:
    """The folder of a finished store of ``data_cfg``'s sentence pairs, prepared here (or by another process,
    waited for) when it is missing or unfinished."""
    splits, settings, records, folder, explicit = _located(data_cfg)
    return finished_store(folder, lambda: _prepare(folder, data_cfg, settings, splits, records, explicit), settings,
                          lambda: _new_plan(data_cfg, settings, splits, records))  # fmt: skip


def resumed_parallel_store(data_cfg: DataConfig, tokenizer_file: Path) -> Any:
    """``data_cfg`` for a translation run resumed from a checkpoint whose tokenizer is ``tokenizer_file``, as
    ``preparation.resumed_store`` gives it for monolingual text: the store the run trained on where it holds that
    tokenizer, else a store prepared with it."""
    if getattr(data_cfg, "store", None):
        return resumed_store(data_cfg, tokenizer_file, "pairs")
    folder = _located(data_cfg)[3]
    if (folder / MANIFEST).is_file() and TokenStore(folder).tokenizer.to_str() == load_tokenizer(
        tokenizer_file
    ).to_str():
        return OmegaConf.merge(data_cfg, {"store": str(folder)})
    return OmegaConf.merge(data_cfg, {"tokenizer": {"path": str(tokenizer_file)}})


def _cuts(path: Path, shard_bytes: int) -> tuple[list[tuple[int, int]], int, int]:
    """(byte offset, line number) of the line starts where ``path`` is cut into pieces of about ``shard_bytes``
    (the first is (0, 0)), its size and its line count."""
    cuts, position, lines, wanted = [(0, 0)], 0, 0, shard_bytes
    with open(path, "rb") as f:
        for line in f:
            position, lines = position + len(line), lines + 1
            if position >= wanted:
                cuts.append((position, lines))
                wanted = position + shard_bytes
    if cuts[-1][0] == position and len(cuts) > 1:
        cuts.pop()
    return cuts, position, lines


def _target_offsets(entry: ParallelSource, lines_at: list[int], source_lines: int) -> tuple[list[int], int]:
    """The byte offsets where the target file's lines ``lines_at`` start, and its size; DataError when it has
    another number of lines than the source file."""
    wanted, offsets, position, lines = iter(lines_at), [], 0, 0
    next_line = next(wanted, None)
    with open(entry.target_path, "rb") as f:
        for line in f:
            while next_line is not None and next_line == lines:
                offsets.append(position)
                next_line = next(wanted, None)
            position, lines = position + len(line), lines + 1
    if lines != source_lines:
        raise DataError(
            f"{entry.source_path} has {source_lines} lines but {entry.target_path} has {lines}; parallel files must "
            "be line-aligned (line i of one translates line i of the other)"
        )
    while next_line is not None:  # a cut at the very end (never: _cuts drops it)
        offsets.append(position)
        next_line = next(wanted, None)
    return offsets, position


def plan_pairs(entries: list[ParallelSource], shard_bytes: int) -> list[dict]:
    """The pieces of a split: entry, source and target byte ranges, the number of the piece's first line."""
    pieces = []
    for number, entry in enumerate(entries):
        cuts, size, lines = _cuts(entry.source_path, shard_bytes)
        if entry.jsonl:
            targets, target_size = [offset for offset, _ in cuts], size
        else:
            targets, target_size = _target_offsets(entry, [line for _, line in cuts], lines)
        ends = [*(offset for offset, _ in cuts[1:]), size]
        target_ends = [*targets[1:], target_size]
        for k, (start, first_line) in enumerate(cuts):
            pieces.append({"entry": number, "source": [start, ends[k]], "target": [targets[k], target_ends[k]],
                           "first_line": first_line + 1})  # fmt: skip
    return pieces


def _new_plan(data_cfg: DataConfig, settings: dict, splits: dict, records: dict) -> dict:
    """A preparation's plan: its settings, its files' records and their pieces (the same on every run)."""
    for entries in splits.values():  # UTF-8 text, not empty, no NUL byte: checked once, before any work
        for path in {p for e in entries or () for p in (e.source_path, e.target_path)}:
            check_text_file(path, PAIRS)
    total = sum(e.source_path.stat().st_size for entries in splits.values() if entries for e in entries)
    shard_bytes = int(getattr(data_cfg, "shard_bytes", None) or min(max(total // 64, 1 << 20), 64_000_000))
    pieces = {split: plan_pairs(entries, shard_bytes) for split, entries in splits.items() if entries}
    return {"settings": settings, "sources": records, "pieces": pieces}


def _prepare(folder: Path, data_cfg: DataConfig, settings: dict, splits: dict, records: dict, explicit: bool) -> None:
    started = time.perf_counter()
    plan = read_plan(folder, settings, records, explicit)
    folder.mkdir(parents=True, exist_ok=True)
    if plan is None:
        plan = _new_plan(data_cfg, settings, splits, records)
        write_json(folder / PLAN, plan)
    tokenizer = _tokenizer(folder, data_cfg, splits["train"])
    jobs = []
    for split, pieces in plan["pieces"].items():
        (folder / split).mkdir(exist_ok=True)
        for number, piece in enumerate(pieces):
            stem = folder / split / f"{number:05d}"
            if stem.with_suffix(".idx").is_file():
                continue
            entry = splits[split][piece["entry"]]
            jobs.append({"entry": [str(entry.source_path), str(entry.target_path)], "piece": piece, "stem": str(stem),
                         "dtype": id_dtype(tokenizer.get_vocab_size()).str, "split": split,
                         "bytes": piece["source"][1] - piece["source"][0]})  # fmt: skip
    languages = (settings["source_lang"], settings["target_lang"])
    wanted = int(getattr(data_cfg, "num_proc", None) or available_cores())
    processes, cpu = run_jobs(jobs, wanted, start_pairs, (tokenizer.to_str(), *languages), tokenize_pairs_piece)
    manifest = {"format": "plm_toolkit token store", "settings": settings, "vocab_size": tokenizer.get_vocab_size(),
                "tokenizer": stable_hash(tokenizer.to_str()), "tokenizer_sha256": file_sha256(folder / TOKENIZER),
                "splits": {}}  # fmt: skip
    for split, pieces in plan["pieces"].items():
        for record in plan["sources"][split]:
            Source(**record).check_unchanged()
        headers = [Shard.open(folder / split / f"{k:05d}").header for k in range(len(pieces))]
        manifest["splits"][split] = {
            "sources": [e.spec for e in splits[split]],
            "shards": len(pieces),
            **{key: sum(h[key] for h in headers) for key in ("tokens", "documents", "skipped_empty")},
            "sha256": stable_hash([h["sha256"] for h in headers]),
        }
    manifest["fingerprint"] = stable_hash({s: v["sha256"] for s, v in manifest["splits"].items()}, settings)
    seconds = round(time.perf_counter() - started, 3)
    manifest["prepared"] = {"seconds": seconds, "processes": processes, "worker_cpu_seconds": round(cpu, 3)}
    write_json(folder / MANIFEST, manifest)
    (folder / PLAN).unlink(missing_ok=True)
    log.info("token store %s: %d training pairs, %d tokens", folder, *(manifest["splits"]["train"][k] for k in
             ("documents", "tokens")))  # fmt: skip


def _tokenizer(folder: Path, data_cfg: DataConfig, entries: list[ParallelSource]) -> Tokenizer:
    """The store's tokenizer: kept from an interrupted preparation, else loaded (data.tokenizer.path) or trained
    on both sides of the training pairs (all sources, then all targets, as far as data.tokenizer.train_sample_bytes
    goes, half for each side)."""
    path = folder / TOKENIZER
    if path.is_file():
        return load_tokenizer(path)
    t = data_cfg.tokenizer
    if t.path:
        tokenizer = load_tokenizer(t.path, lowercase=t.lowercase is None or bool(t.lowercase))
    else:
        budget = int(getattr(t, "train_sample_bytes", 100_000_000)) // 2
        languages = (str(data_cfg.source_lang), str(data_cfg.target_lang))

        def texts() -> Iterator[str]:
            for side in (0, 1):
                used = 0
                for pair in (p for e in entries for p in iter_pairs(e, *languages, ReadCounts())):
                    if used >= budget:
                        break
                    used += len(pair[side].encode("utf-8"))
                    yield pair[side]

        records = [f.record() for e in entries for f in _files(e)]
        sample = (2 * budget, sum(f.size for e in entries for f in _files(e)))
        tokenizer = train_cached(data_cfg, stable_hash("parallel", records, languages, budget), texts, sample=sample)
    write_text(path, tokenizer.to_str())
    return tokenizer
