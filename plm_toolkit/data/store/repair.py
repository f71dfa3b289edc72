"""Repairing a damaged token store: plm-prepare, given the overrides that prepared a store that no longer checks out
(a manifest cut short, an index or shard damaged or missing, a tokenizer.json replaced; ``data/store/check.py``),
turns it back into an unfinished preparation and finishes it, as it resumes a preparation that was killed.

What still checks out is kept: where the manifest reads and describes this very preparation (the same settings, the
same files, as many shards a split) and the tokenizer is the one it records, the tokenizer and every shard that
checks out stay, and only the others are tokenized again. Otherwise the store's files are removed and it is
prepared afresh (a trained tokenizer comes out the same: ``data/tokenization/reproducible_training.py``). Repairing
is plm-prepare's alone (``repairing_damaged_stores``); plm-train refuses a damaged store and names plm-prepare.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from plm_toolkit.data.store.check import checked_shard, file_sha256
from plm_toolkit.data.store.token_store import MANIFEST, DamagedStore, read_manifest, write_json

log = logging.getLogger("plm_toolkit")

_REPAIRING: ContextVar[bool] = ContextVar("repairing_damaged_stores", default=False)


@contextmanager
def repairing_damaged_stores() -> Iterator[None]:
    """Within: a damaged store that a preparation meets is repaired (plm-prepare), not refused."""
    token = _REPAIRING.set(True)
    try:
        yield
    finally:
        _REPAIRING.reset(token)


def repairing() -> bool:
    return _REPAIRING.get()


def reopen(folder: Path, damage: DamagedStore, plan: dict, plan_file: str, tokenizer_file: str) -> None:
    """The damaged finished store at ``folder`` made an unfinished preparation of ``plan`` (``{"settings",
    "sources", "pieces"}``, written to ``plan_file``), keeping its tokenizer and sound shards where the manifest
    describes this plan, else nothing; logs what it kept."""
    manifest = _readable(folder)
    tokenizer = folder / tokenizer_file
    same = (
        manifest is not None
        and manifest["settings"] == plan["settings"]
        and set(manifest["splits"]) == set(plan["pieces"])
        and all(
            manifest["splits"][split].get("sources") == plan["sources"].get(split)
            and manifest["splits"][split]["shards"] == len(pieces)
            for split, pieces in plan["pieces"].items()
        )
        and tokenizer.is_file()
        and manifest.get("tokenizer_sha256") == file_sha256(tokenizer)
    )
    write_json(folder / plan_file, plan)  # first: a repair cut short resumes as a preparation
    (folder / MANIFEST).unlink(missing_ok=True)
    if not same:
        for entry in folder.iterdir():
            if entry.name != plan_file:
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
        log.warning("%s: the token store %s is damaged; repairing it: preparing it afresh", damage.what, folder)
        return
    shutil.rmtree(folder / "layouts", ignore_errors=True)  # examples cut from the damaged ids, if any
    kept = total = 0
    for split, pieces in plan["pieces"].items():
        for number in range(len(pieces)):
            stem = folder / split / f"{number:05d}"
            total += 1
            try:
                checked_shard(folder, stem, int(manifest["vocab_size"]))
                kept += 1
            except DamagedStore:
                for path in stem.parent.glob(f"{stem.name}.*"):  # the shard, its index, what a side channel adds
                    path.unlink()
    log.warning("%s: the token store %s is damaged; repairing it: %d of %d shards kept, the others tokenized again",
                damage.what, folder, kept, total)  # fmt: skip


def _readable(folder: Path) -> dict | None:
    try:
        return read_manifest(folder)
    except DamagedStore:
        return None
