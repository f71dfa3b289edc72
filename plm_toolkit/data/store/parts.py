"""Preparing one token store across nodes: ``plm-prepare data.prepare_parts=N data.prepare_part=K`` (K = 0..N-1),
one job per node on a shared file system, each tokenizing its share of the store's shards.

1. The first job to arrive plans the store (its pieces) and trains or loads its tokenizer, under a lock beside the
   store; the others wait for the plan and the tokenizer on the file system (``data/store/lock.py``), as every rank of a
   training job waits for a store another rank prepares. All jobs then read the same plan.
2. The pieces are dealt out to the parts by size, largest first, each to the part with the fewest bytes so far (the
   same deal in every job, from the plan alone). A job tokenizes its own pieces with its ``data.num_proc`` workers,
   skipping those already finished (a job that is requeued resumes), under a lock of its own part.
3. A job that finds every shard of the store finished writes the manifest, as a one-node preparation does (checking
   every shard and source); the last part to finish is that job. A part that finishes while others still work logs
   how many shards are left and exits: its node is free at once.

Should the file system hide another node's last shard for a while (NFS caches directory listings for up to a
minute), every part may exit before seeing all shards: any later plm-prepare or plm-train of the same store then
finds every shard finished and only writes the manifest.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from plm_toolkit.core.errors import ConfigError
from plm_toolkit.data.sources.corpus import SPLITS
from plm_toolkit.data.sources.pieces import resolve_sources
from plm_toolkit.data.store.lock import run_once
from plm_toolkit.data.store.preparation import (
    PARTS,
    PLAN,
    TOKENIZER,
    _prepare,
    finished_store,
    plan_and_tokenizer,
    store_folder,
)
from plm_toolkit.data.store.settings import channel_of, check_settings, store_settings
from plm_toolkit.data.store.token_store import MANIFEST, read_manifest

log = logging.getLogger("plm_toolkit")


def deal_pieces(plan: dict, parts: int) -> list[list[tuple[str, int]]]:
    """Each part's pieces (split, number): largest first, each to the part with the fewest bytes so far (ties to
    the lower part), so that the parts' bytes differ by at most about one piece."""
    pieces = [(split, number, piece["end"] - piece["start"]) for split, rows in plan["pieces"].items()
              for number, piece in enumerate(rows)]  # fmt: skip
    loads, dealt = [0] * parts, [[] for _ in range(parts)]
    for split, number, size in sorted(pieces, key=lambda p: (-p[2], p[0], p[1])):
        part = min(range(parts), key=lambda k: (loads[k], k))
        loads[part] += size
        dealt[part].append((split, number))
    return dealt


def _stem(folder: Path, split: str, number: int) -> Path:
    return folder / split / f"{number:05d}"


def shards_left(folder: Path, plan: dict, pieces=None) -> int:
    """How many of ``pieces`` (default: all of the plan's) have no finished shard yet (its index is written last)."""
    pieces = pieces if pieces is not None else [(s, n) for s, rows in plan["pieces"].items() for n in range(len(rows))]
    return sum(not _stem(folder, split, number).with_suffix(".idx").is_file() for split, number in pieces)


def claim_parts(folder: Path, parts: int) -> None:
    """Record how many parts ``folder`` is prepared in (the first job to get here does), or refuse a job launched
    with another number: its deal of the shards would differ, and no job would ever see them all finished."""
    path = folder / PARTS
    if not path.is_file():
        temporary = folder / f".{PARTS}.{os.getpid()}.tmp"
        temporary.write_text(json.dumps({"prepare_parts": parts}) + "\n", encoding="utf-8")
        try:
            os.link(temporary, path)  # fails where another job's record is there already: the first one stands
        except FileExistsError:
            pass
        finally:
            temporary.unlink()
    recorded = json.loads(path.read_text(encoding="utf-8"))["prepare_parts"]
    if recorded != parts:
        raise ConfigError(
            f"data.prepare_parts={parts}: the token store {folder} is being prepared in data.prepare_parts="
            f"{recorded} parts (recorded by the job that began it, {path}); launch every part with "
            f"data.prepare_parts={recorded} (or, to begin again in {parts} parts, stop those jobs and remove {folder})"
        )


def prepare_part(data_cfg: Any, unit: str, spellings: bool, units: Any, part: int, parts: int) -> tuple[Path, bool]:
    """Tokenize part ``part`` of ``parts`` of the store of ``data_cfg``; returns its folder and whether the store is
    finished (this job found every shard done and wrote the manifest, or another job had)."""
    if not 0 <= part < parts:
        raise ConfigError(f"data.prepare_part={part}: expected 0 to data.prepare_parts - 1 = {parts - 1}")
    channel = channel_of(unit)
    if channel is not None and channel.one_node:
        raise ConfigError(f"data.prepare_parts: {channel.one_node}; prepare on one node")
    settings = store_settings(data_cfg, unit, spellings, units)
    explicit = bool(getattr(data_cfg, "store", None))
    splits = {split: resolve_sources(data_cfg, split) for split in SPLITS}
    folder = store_folder(data_cfg, settings, splits)
    manifest = read_manifest(folder)
    if manifest is not None:
        check_settings(manifest["settings"], settings, folder)
        return folder, True
    planned = lambda: (folder / MANIFEST).is_file() or ((folder / PLAN).is_file() and (folder / TOKENIZER).is_file())  # noqa: E731
    run_once(
        folder.parent / f".{folder.name}.plan.lock",
        planned,
        lambda: plan_and_tokenizer(folder, data_cfg, settings, splits, explicit),
        f"the plan and tokenizer of the token store {folder}",
    )
    if (folder / MANIFEST).is_file():
        return finished_store(folder, lambda: None, settings), True
    plan, _ = plan_and_tokenizer(folder, data_cfg, settings, splits, explicit)
    claim_parts(folder, parts)
    mine = deal_pieces(plan, parts)[part]
    owned = {str(_stem(folder, split, number)) for split, number in mine}
    keep = lambda _, jobs: [job for job in jobs if job["stem"] in owned]  # noqa: E731
    run_once(
        folder.parent / f".{folder.name}.part-{part}-of-{parts}.lock",
        lambda: (folder / MANIFEST).is_file() or shards_left(folder, plan, mine) == 0,
        lambda: _prepare(folder, data_cfg, settings, splits, explicit, units, part=keep),
        f"part {part} of {parts} of the token store {folder}",
    )
    left = shards_left(folder, plan) if not (folder / MANIFEST).is_file() else 0
    if left:
        log.info(
            "token store %s: part %d of %d done (%d shards, pid %d); %d shards of other parts are left, and the part "
            "that finishes last writes the manifest",
            folder, part, parts, len(mine), os.getpid(), left,
        )  # fmt: skip
        return folder, False
    # Every shard is there: the manifest, written once (under the store's lock) after checking them all.
    return finished_store(folder, lambda: _prepare(folder, data_cfg, settings, splits, explicit, units), settings), True
