"""Checking a finished token store before it is used: what is cheap to check, every time a run opens it.

A store's bytes are trusted by everything that reads it (layouts cut windows from memory-mapped ids), so a store
damaged after plm-prepare wrote it (a byte flipped on disk, a shard or index removed, a tokenizer.json replaced)
would be trained on silently, or end in an IndexError deep in the model. Before use, each shard's size is checked
against its index, its ids against the crc32 its index records (about 7 GB/s: seconds for a large store) and
against the vocabulary, and the tokenizer against the manifest's digest. A failure names the file and says what
repairs it: plm-prepare with the overrides that prepared the store (``data/store/repair.py``).
"""

from __future__ import annotations

import hashlib
import zlib
from pathlib import Path

import numpy as np

from plm_toolkit.core.errors import DataError
from plm_toolkit.data.store.token_store import MANIFEST, Shard, damaged, read_manifest

_BLOCK = 1 << 24  # ids checked at a time
_VERIFIED: set[tuple] = set()  # the stores this process checked, as ``_state`` saw them


def file_sha256(path: Path) -> str:
    """The sha256 of a small file's bytes (the store's tokenizer.json, as written)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def verify_store(folder: Path) -> None:
    """DataError (``damaged``) naming the first file of the finished store at ``folder`` that does not match what
    its manifest and indexes record."""
    from tokenizers import Tokenizer

    folder = Path(folder)
    manifest = read_manifest(folder)
    if manifest is None:
        raise damaged(folder, f"{folder / MANIFEST} is missing")
    key = _state(folder)
    if key in _VERIFIED:  # a run opens its store more than once (its examples, then its layouts)
        return
    tokenizer_file = folder / "tokenizer.json"
    try:
        tokenizer = Tokenizer.from_file(str(tokenizer_file))
    except Exception:  # missing or unreadable: the tokenizers library raises its own exception types
        raise damaged(folder, f"{tokenizer_file} is missing or does not load") from None
    if manifest.get("tokenizer_sha256") not in (None, file_sha256(tokenizer_file)):
        raise damaged(folder, f"{tokenizer_file} is not the tokenizer the store's ids come from ({MANIFEST} differs)")
    vocab_size = tokenizer.get_vocab_size()
    for split, recorded in manifest["splits"].items():
        tokens = 0
        for number in range(recorded["shards"]):
            tokens += checked_shard(folder, folder / split / f"{number:05d}", vocab_size).num_tokens
        if "tokens" in recorded and tokens != recorded["tokens"]:
            raise damaged(
                folder, f"the shards of {folder / split} hold {tokens} tokens, {MANIFEST} records {recorded['tokens']}"
            )
    _VERIFIED.add(key)


def _state(folder: Path) -> tuple:
    """Every file of the store with its size, modification time and inode: what a change to it would change."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    return (str(folder.resolve()), *((str(p), p.stat().st_size, p.stat().st_mtime_ns, p.stat().st_ino) for p in files))


def checked_shard(folder: Path, stem: Path, vocab_size: int) -> Shard:
    """The shard ``stem`` of the store at ``folder``, whole (its index, its size) and holding the ids its index
    records, each within ``vocab_size``; else DamagedStore naming the file."""
    try:
        shard = Shard.open(stem)
    except DataError as err:
        raise damaged(folder, str(err)) from None
    _check_ids(folder, shard, vocab_size)
    return shard


def _check_ids(folder: Path, shard: Shard, vocab_size: int) -> None:
    ids, path = shard.ids, shard.stem.with_suffix(".bin")
    crc, beyond = 0, None
    for start in range(0, len(ids), _BLOCK):
        block = np.asarray(ids[start : start + _BLOCK])
        crc = zlib.crc32(block.tobytes(), crc)  # a copy of one block at a time: the memory stays bounded
        if beyond is None and int(block.max()) >= vocab_size:
            beyond = start + int(np.argmax(block >= vocab_size))
    recorded = shard.header.get("ids_crc32")
    if recorded is not None and crc != recorded:
        raise damaged(
            folder,
            f"token store shard {path} does not match the checksum its index records (crc32 {crc:08x}, expected "
            f"{recorded:08x}): its bytes changed since plm-prepare wrote them",
        )
    if beyond is not None:
        raise damaged(
            folder,
            f"token store shard {path} holds token id {int(ids[beyond])} at position {beyond}, beyond the "
            f"vocabulary of its tokenizer ({vocab_size} tokens)",
        )
