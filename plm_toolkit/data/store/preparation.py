"""Preparing a token store (``data/store/token_store.py``): ``plm-prepare``, and ``plm-train`` when its store is
missing.

1. The sources of each split are found (``data/sources/pieces.py``) and cut into pieces at document boundaries.
2. The tokenizer is loaded (``data.tokenizer.path``) or trained on a sample of the training text of at most
   ``data.tokenizer.train_sample_bytes``: the same share from the start of every piece.
3. ``data.num_proc`` worker processes (default: the cores this process may use) tokenize one piece each into one
   shard (``data/store/shard_worker.py``), reporting progress (MB/s and the time left) to the main process.
4. The sources are checked again (a file that changed while it was read refuses the store), and the manifest is
   written: the store is finished.

Everything is written under temporary names and renamed, so a preparation that is killed resumes from its finished
shards (the plan and the tokenizer are kept in the folder) and gives the same store. Several processes (the ranks of
a data-parallel job, on one node or many sharing the folder) prepare a store once: the first takes a lock and the
others wait for its manifest (``data/store/lock.py``), without entering any collective. What keys a store, and the
check that a finished one serves a run: ``data/store/settings.py``; a unit that carries codes beside the ids (ERNIE's
knowledge units) is a side channel another package registers (``data/store/side_channels.py``).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokenizers import Tokenizer
from tqdm import tqdm

from plm_toolkit.core.atomic import write_text
from plm_toolkit.core.cache import cache_root, stable_hash
from plm_toolkit.core.choices import choice
from plm_toolkit.core.errors import DataError
from plm_toolkit.data.sources.corpus import SPLITS, document_boundary
from plm_toolkit.data.sources.pieces import Source, no_text, plan_pieces, resolve_sources
from plm_toolkit.data.store.check import file_sha256, verify_store
from plm_toolkit.data.store.given import check_store_sources
from plm_toolkit.data.store.lock import run_once
from plm_toolkit.data.store.processes import CONTEXT, available_cores, worker_pool
from plm_toolkit.data.store.repair import reopen, repairing
from plm_toolkit.data.store.settings import channel_of, check_settings, setting_difference, store_settings
from plm_toolkit.data.store.shard_worker import maybe_kill, start_worker, tokenize_piece
from plm_toolkit.data.store.stop_signals import signals_stop_preparation
from plm_toolkit.data.store.token_store import (
    MANIFEST,
    DamagedStore,
    Shard,
    damaged,
    id_dtype,
    read_manifest,
    write_json,
)
from plm_toolkit.data.tokenization.tokenizer import load_or_train_tokenizer, load_tokenizer, vocab_from_tokenizer

if TYPE_CHECKING:
    from plm_toolkit.core.data_schema import DataConfig

log = logging.getLogger("plm_toolkit")

PLAN = "plan.json"
# The number of parts an unfinished store is being prepared in across nodes (data/store/parts.py).
PARTS = "prepare_parts.json"
TOKENIZER = "tokenizer.json"


def store_folder(data_cfg: DataConfig, settings: dict, splits: dict[str, list[Source] | None]) -> Path:
    """``data.store``, or the cache's folder for these settings and files."""
    if getattr(data_cfg, "store", None):
        return Path(os.path.expanduser(str(data_cfg.store)))
    records = {split: [s.record() for s in sources] for split, sources in splits.items() if sources}
    return cache_root(data_cfg) / "stores" / stable_hash(settings, records)


def prepare_store(data_cfg: DataConfig, unit: str, spellings: bool = False, units: Any = None) -> Path:
    """The folder of a finished store for ``data_cfg`` holding ``unit`` (``data/store/shard_worker.py``), prepared here
    (or by another process, waited for) when it is missing or unfinished; ``units``: where the side channel of
    ``unit`` finds its codes (``data/store/side_channels.py``; ERNIE's knowledge units: the objective config)."""
    settings = store_settings(data_cfg, unit, spellings, units)
    explicit = bool(getattr(data_cfg, "store", None))
    damage = None
    if explicit:
        folder = Path(os.path.expanduser(str(data_cfg.store)))
        if folder.exists() and not folder.is_dir():
            raise DataError(f"data.store={folder} is a file; expected a folder for the token store")
        try:
            if _given_store(folder, data_cfg, settings):
                return folder
        except DamagedStore as err:
            if not repairing():
                raise
            damage = err
    splits = {split: resolve_sources(data_cfg, split) for split in SPLITS}
    folder = store_folder(data_cfg, settings, splits)
    plan = lambda: new_plan(data_cfg, settings, splits)  # noqa: E731
    if damage is not None:
        reopen(folder, damage, plan(), PLAN, TOKENIZER)
    return finished_store(folder, lambda: _prepare(folder, data_cfg, settings, splits, explicit, units), settings, plan)


def _given_store(folder: Path, data_cfg: DataConfig, settings: dict) -> bool:
    """True where data.store's ``folder`` holds a finished store that serves the run (DataError where it does not,
    DamagedStore where it does not check out); False where it is to be prepared (or resumed)."""
    manifest = read_manifest(folder)
    if manifest is not None:
        check_settings(manifest["settings"], settings, folder)
        check_store_sources(folder, manifest, data_cfg, resolve_sources)
        verify_store(folder)
        return True
    if folder.is_dir() and not (folder / PLAN).is_file() and any(folder.iterdir()):
        if (folder / TOKENIZER).is_file() or (folder / "train").is_dir():
            raise damaged(folder, f"{folder / MANIFEST} is missing")
        raise DataError(f"data.store={folder} holds other files; remove it or give another folder")
    return False


def finished_store(
    folder: Path, prepare: Callable[[], None], settings: dict, plan: Callable[[], dict] | None = None
) -> Path:
    """``folder`` once it holds a finished store (prepared by ``prepare()`` here, or by another process, waited
    for), whose settings are ``settings`` (else DataError naming the first that differs). A damaged store is
    refused, or within ``repairing_damaged_stores`` (plm-prepare) repaired from ``plan()``, its preparation's plan
    (``data/store/repair.py``)."""
    try:
        return _finished(folder, prepare, settings)
    except DamagedStore as err:
        if plan is None or not repairing():
            raise
        reopen(folder, err, plan(), PLAN, TOKENIZER)
    return _finished(folder, prepare, settings)


def _finished(folder: Path, prepare: Callable[[], None], settings: dict) -> Path:
    done = lambda: (folder / MANIFEST).is_file()  # noqa: E731
    try:
        with signals_stop_preparation():  # SIGTERM or SIGHUP: one line, the lock removed, no worker tracebacks
            run_once(folder.parent / f".{folder.name}.lock", done, prepare, f"the token store {folder} to be prepared")
    except OSError as err:
        if err.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise
        raise DataError(
            f"data.store={folder}: cannot write the token store there ({os.strerror(err.errno)}: {err.filename}); "
            "give data.store (or data.cache_dir) a writable folder, or prepare the store elsewhere and copy it"
        ) from None
    check_settings(read_manifest(folder)["settings"], settings, folder)
    verify_store(folder)
    return folder


def resumed_store(
    data_cfg: DataConfig, tokenizer_file: Path, unit: str, spellings: bool = False, units: Any = None
) -> Any:
    """``data_cfg`` for a run resumed from a checkpoint whose tokenizer is ``tokenizer_file``: the store the run was
    prepared into where it still holds that tokenizer (nothing is tokenized again), else a store prepared with that
    tokenizer (data.tokenizer.path). A given data.store must hold the checkpoint's tokenizer."""
    from omegaconf import OmegaConf

    wanted = load_tokenizer(tokenizer_file).to_str()
    if getattr(data_cfg, "store", None):
        folder = Path(os.path.expanduser(str(data_cfg.store)))
        held = folder / TOKENIZER
        if (folder / MANIFEST).is_file() and load_tokenizer(held).to_str() != wanted:
            raise DataError(
                f"data.store={folder} holds another tokenizer than the checkpoint being resumed ({tokenizer_file}); "
                "resume with the store the run trained on"
            )
        return data_cfg
    settings = store_settings(data_cfg, unit, spellings, units)
    folder = store_folder(data_cfg, settings, {split: resolve_sources(data_cfg, split) for split in SPLITS})
    if (folder / MANIFEST).is_file() and load_tokenizer(folder / TOKENIZER).to_str() == wanted:
        return OmegaConf.merge(data_cfg, {"store": str(folder)})
    return OmegaConf.merge(data_cfg, {"tokenizer": {"path": str(tokenizer_file)}})


def _prepare(
    folder: Path, data_cfg: DataConfig, settings: dict, splits: dict, explicit: bool, units: Any = None, part=None
) -> None:
    """Plan, tokenizer, shards, manifest; ``part`` (``data/store/parts.py``): a function that keeps the jobs of
    one part of a preparation across nodes, which then stops before the manifest."""
    started = time.perf_counter()
    plan = store_plan(folder, data_cfg, settings, splits, explicit)
    wanted = int(getattr(data_cfg, "num_proc", None) or available_cores())
    channel = channel_of(settings["unit"])
    # The side channel first: a corpus its units cannot use (ERNIE's, without letters) is refused before a
    # tokenizer is trained on it.
    encoder = channel.encoder(folder, data_cfg, plan, units, wanted) if channel is not None else None
    tokenizer = _tokenizer(folder, data_cfg)
    unk_id = vocab_from_tokenizer(tokenizer).require("unk_id", "keeping the spelling of unknown words") if (
        settings["spellings"]) else None  # fmt: skip
    if encoder is not None and encoder.main_process_only:
        wanted = 1
    jobs = _jobs(folder, data_cfg, plan, tokenizer)
    setup = (tokenizer.to_str(), settings["unit"], unk_id)
    processes, cpu = run_jobs(part(plan, jobs) if part else jobs, wanted, start_worker, setup, tokenize_piece, encoder)
    if part is not None:
        return
    _finish(folder, data_cfg, settings, plan, tokenizer, started, processes, cpu)


def plan_and_tokenizer(folder: Path, data_cfg: Any, settings: dict, splits: dict, explicit: bool):
    """The store's plan (its pieces) and tokenizer: kept from an unfinished preparation, else made and written."""
    plan = store_plan(folder, data_cfg, settings, splits, explicit)
    return plan, _tokenizer(folder, data_cfg)


def store_plan(folder: Path, data_cfg: Any, settings: dict, splits: dict, explicit: bool) -> dict:
    """The store's plan (its pieces): kept from an unfinished preparation, else made and written."""
    plan = read_plan(folder, settings, _records(splits), explicit)
    folder.mkdir(parents=True, exist_ok=True)
    if plan is None:  # written first: the tokenizer of a resumed preparation is the one its plan led to
        plan = new_plan(data_cfg, settings, splits)
        write_json(folder / PLAN, plan)
    return plan


def new_plan(data_cfg: Any, settings: dict, splits: dict) -> dict:
    """A preparation's plan: its settings, its files' records and their pieces (the same on every run)."""
    boundary, shard_bytes = document_boundary(data_cfg), getattr(data_cfg, "shard_bytes", None)
    pieces = {split: [vars(p) for p in plan_pieces(sources, shard_bytes, boundary)] for split, sources in
              splits.items() if sources}  # fmt: skip
    return {"settings": settings, "sources": _records(splits), "pieces": pieces}


def _records(splits: dict) -> dict:
    return {split: [s.record() for s in sources] for split, sources in splits.items() if sources}


def _finish(folder, data_cfg, settings, plan, tokenizer, started, processes, cpu) -> None:
    """Check every shard and source, then write the manifest: the store is finished."""
    unit = settings["unit"]
    channel = channel_of(unit)
    characters: dict[str, int] = {}
    manifest = {"format": "plm_toolkit token store", "settings": settings, "vocab_size": tokenizer.get_vocab_size(),
                "tokenizer": stable_hash(tokenizer.to_str()), "tokenizer_sha256": file_sha256(folder / TOKENIZER),
                "splits": {}}  # fmt: skip
    for split, pieces in plan["pieces"].items():
        sources = [Source(**r) for r in plan["sources"][split]]
        for source in sources:
            source.check_unchanged()
        headers = [Shard.open(folder / split / f"{k:05d}").header for k in range(len(pieces))]
        characters[split] = sum(h.get("characters", 0) for h in headers)
        _check_text(sources, pieces, headers, choice(data_cfg.document_boundary), str(data_cfg.text_column))
        if channel is not None:  # what its codes add up to (ERNIE's units: a split with no letter is refused here)
            manifest["splits"][split] = {unit: channel.summary(folder, split, len(pieces), [s.path for s in sources])}
        manifest["splits"][split] = {
            **manifest["splits"].get(split, {}),
            "sources": plan["sources"][split],
            "shards": len(pieces),
            "bytes": sum(s.size for s in sources),
            **{key: sum(h[key] for h in headers) for key in ("tokens", "documents", "sentences")},
            "sha256": stable_hash([h["sha256"] for h in headers]),
        }
    manifest["fingerprint"] = stable_hash({s: v["sha256"] for s, v in manifest["splits"].items()}, settings)
    seconds = time.perf_counter() - started
    manifest["prepared"] = {"seconds": round(seconds, 3), "processes": processes, "worker_cpu_seconds": round(cpu, 3)}
    write_json(folder / MANIFEST, manifest)
    (folder / PLAN).unlink(missing_ok=True)
    (folder / PARTS).unlink(missing_ok=True)
    log.info(store_report(folder, manifest, characters, seconds, processes))


def store_report(folder: Path, manifest: dict, characters: dict[str, int], seconds: float, processes: int) -> str:
    """The line a finished preparation logs: the text's size in characters (the files' size where they are stored
    otherwise: compressed, JSONL, Parquet), and a rate only where there is one to speak of."""
    train = manifest["splits"]["train"]
    text = characters.get("train", 0)
    stored = f", {train['bytes'] / 1e6:.1f} MB as stored" if abs(train["bytes"] - text) > 0.05 * max(text, 1) else ""
    line = (
        f"token store {folder}: {train['tokens']} tokens in {train['documents']} documents from "
        f"{text / 1e6:.2f} M characters of training text{stored}"
    )
    rate = sum(characters.values()) / 1e6 / max(seconds, 1e-9)
    if seconds >= 1.0 and rate >= 0.1:
        line += f", {rate:.1f} M characters/s"
    return f"{line} with {processes} process(es) in {seconds:.1f} s"


def read_plan(folder: Path, settings: dict, records: dict, explicit: bool) -> dict | None:
    """The plan of an unfinished preparation of the same store (resumed), or None to start afresh."""
    path = folder / PLAN
    plan = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    if plan is not None and plan["settings"] == settings and plan["sources"] == records:
        return plan
    if folder.is_dir() and any(folder.iterdir()):
        if explicit and plan is not None:
            raise DataError(unlike(folder, plan, settings, records))
        if explicit:
            raise DataError(f"data.store={folder} holds other files; remove it or give another folder")
        shutil.rmtree(folder)  # the cache's own folder, keyed on settings and files: an older format
    return None


def unlike(folder: Path, plan: dict, settings: dict, records: dict) -> str:
    """How an unfinished preparation's plan differs from this run's, and what to do: a corpus file that changed
    since (prepare again), else the setting or the file list that differs (another job of a preparation across
    nodes launched otherwise, whose shards removing the folder would throw away)."""
    same = "it was begun with (every part of a preparation across nodes needs the same), or another folder (removing "
    kept = "the folder throws away the shards prepared so far)"
    begun = f"data.store={folder} holds an unfinished preparation"
    if plan["settings"] != settings:
        return f"{begun} with {setting_difference(plan['settings'], settings)}: give the settings {same}{kept}"
    planned = {r["path"]: r for rows in plan["sources"].values() for r in rows}
    wanted = {r["path"]: r for rows in records.values() for r in rows}
    changed = [path for path in wanted if path in planned and planned[path] != wanted[path]]
    if changed:
        return (
            f"corpus file {changed[0]} changed since the preparation of data.store={folder} began (size or "
            "modification time differ); the store is refused: remove the folder to prepare it again"
        )
    added, missing = [p for p in wanted if p not in planned], [p for p in planned if p not in wanted]
    files = f"{added[0]} is not among them" if added else f"this run does not name {missing[0]}"
    return f"{begun} of other corpus files ({files}): give the files {same}{kept}"


def _tokenizer(folder: Path, data_cfg: DataConfig) -> Tokenizer:
    """The store's tokenizer: kept from an interrupted preparation, else loaded or trained on a sample (cached)."""
    path = folder / TOKENIZER
    if path.is_file():
        return load_tokenizer(path)
    tokenizer = load_or_train_tokenizer(data_cfg)
    write_text(path, tokenizer.to_str())
    return tokenizer


def _jobs(folder: Path, data_cfg: DataConfig, plan: dict, tokenizer: Tokenizer) -> list[dict]:
    """One job per piece whose shard is not finished yet (a finished one is kept: the preparation resumes)."""
    jobs = []
    dtype = id_dtype(tokenizer.get_vocab_size()).str
    for split, pieces in plan["pieces"].items():
        (folder / split).mkdir(exist_ok=True)
        for number, piece in enumerate(pieces):
            stem = folder / split / f"{number:05d}"
            if stem.with_suffix(".idx").is_file():
                try:
                    Shard.open(stem)
                    continue
                except DataError:
                    pass  # a damaged shard is written again
            source = plan["sources"][split][piece["source"]]
            jobs.append({"source": source, "piece": piece, "stem": str(stem), "dtype": dtype, "split": split,
                         "boundary": document_boundary(data_cfg), "text_column": str(data_cfg.text_column),
                         "bytes": piece["end"] - piece["start"]})  # fmt: skip
    return jobs


def run_jobs(jobs: list[dict], wanted: int, initializer, setup: tuple, work, encoder=None) -> tuple[int, float]:
    """Run ``work`` on every job (a piece to tokenize into its shard), in this process or in a pool of at most
    ``wanted`` worker processes, each set up by ``initializer(*setup, progress counter, encoder)`` (a side channel's
    encoder, ``data/store/side_channels.py``); returns how many processes, and the CPU seconds the pieces took."""
    processes = max(1, min(wanted, len(jobs)))
    total = sum(job["bytes"] for job in jobs)
    bar = tqdm(total=total, unit="B", unit_scale=True, desc="tokenizing", disable=None, dynamic_ncols=True)
    try:
        if processes == 1:
            initializer(*setup, None, encoder)
            cpu = 0.0
            for finished, job in enumerate(jobs, 1):
                cpu += work(job)
                bar.update(job["bytes"])
                maybe_kill(finished)
            return 1, cpu
        counter = CONTEXT.Value("q", 0)
        with worker_pool(processes, initializer, (*setup, counter, encoder)) as pool:
            results = [pool.apply_async(work, (job,)) for job in jobs]
            cpu = 0.0
            for finished, result in enumerate(results, 1):
                while not result.ready():
                    result.wait(0.25)
                    bar.update(min(counter.value, total) - bar.n)
                cpu += result.get()  # a worker's error is raised here
                maybe_kill(finished)
            bar.update(total - bar.n)
        return processes, cpu
    finally:
        bar.close()


def _check_text(sources: list[Source], pieces: list[dict], headers: list[dict], boundary: str, column: str) -> None:
    """DataError naming a source that gave no document, in the words of its format."""
    documents = [0] * len(sources)
    for piece, header in zip(pieces, headers, strict=True):
        documents[piece["source"]] += header["documents"]
    for source, count in zip(sources, documents, strict=True):
        if count == 0:
            raise DataError(no_text(source, boundary, column))
