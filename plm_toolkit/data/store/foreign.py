"""Megatron-LM's and nanoGPT's token files (``data/store/token_files.py``) read as a token store: ``data.store=PREFIX``
(PREFIX.bin + PREFIX.idx) or ``data.store=path/train.bin``, with ``data.tokenizer.path`` the tokenizer the ids come
from. The files are memory-mapped as they are; the layouts that need only documents of ids read them through the
store's interface (``data/store/token_store.py``): stream windows (GPT, Transformer-XL, XLNet, T5's spans), RoBERTa's
full sentences and ELMo's sentence streams (a Megatron sequence, else a document, counts as a sentence). Sentence pairs
(NSP, SOP) need sentence boundaries these files do not have, and are refused.

One pass over each file (constant memory, once per file, cached under ``data.cache_dir/foreign``) finds the largest
id (refused beyond the tokenizer's vocabulary), nanoGPT's document ends (after every end-of-text id) and whether
every document already ends with the document separator (nanoGPT always; Megatron with ``--append-eod``): the
layouts then add none of their own, so that the stream is the file's ids as written.

A validation split is the file beside the training one whose name has ``val``, ``valid`` or ``validation`` for the
``train`` of the training file's name (nanoGPT's val.bin beside train.bin; ``plm-export --format megatron``'s
validation pair beside its train pair).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from plm_toolkit.core.cache import cache_root, stable_hash
from plm_toolkit.core.errors import ConfigError, DataError
from plm_toolkit.data.store.lock import written_once
from plm_toolkit.data.store.token_files import CHUNK, NANOGPT_DTYPE, check_nanogpt, is_megatron_index, open_megatron
from plm_toolkit.data.store.token_store import Shard, StoreSplit
from plm_toolkit.data.tokenization.tokenizer import load_tokenizer, vocab_from_tokenizer

log = logging.getLogger("plm_toolkit")

SURVEY_VERSION = 1
_VALIDATION_NAMES = ("val", "valid", "validation")
_NEEDS_SENTENCES = {"sentence_pairs": "BERT's sentence pairs (NSP)", "segment_pairs": "ALBERT's segment pairs (SOP)"}


def foreign_kind(store: Any) -> tuple[str, Path] | None:
    """("megatron", prefix) or ("nanogpt", file) where ``data.store`` names a foreign token file, else None."""
    if not store:
        return None
    path = Path(os.path.expanduser(str(store)))
    if path.suffix in (".bin", ".idx") and is_megatron_index(path.with_suffix(".idx")):
        return "megatron", path.with_suffix("")
    if is_megatron_index(path.with_name(path.name + ".idx")):
        return "megatron", path
    if path.suffix == ".bin" and not path.with_suffix(".idx").exists():
        return "nanogpt", path
    if path.with_name(path.name + ".bin").is_file() or path.with_name(path.name + ".idx").is_file():
        return "megatron", path  # half a pair: open_megatron names the missing file
    return None


def open_foreign_store(data_cfg: Any, layout: str, units: Any = None, spellings: bool = False):
    """The ForeignStore ``data.store`` names, or None where it names a store of this toolkit's own."""
    found = foreign_kind(getattr(data_cfg, "store", None))
    if found is None:
        return None
    kind, path = found
    what = f"data.store={data_cfg.store} is {'a Megatron-LM' if kind == 'megatron' else 'a nanoGPT'} token file"
    if layout in _NEEDS_SENTENCES or units is not None or spellings:
        needs = _NEEDS_SENTENCES.get(layout)
        lacks = "sentence boundaries" if needs else "text"
        needs = needs or ("ERNIE's knowledge units" if units is not None else "the spelling of unknown words")
        raise DataError(
            f"{what}: documents of ids without {lacks}, which {needs} need; prepare the corpus's text with "
            "plm-prepare instead"
        )
    if not data_cfg.tokenizer.path:
        raise ConfigError(f"{what}: give data.tokenizer.path, the tokenizer its ids come from (ids hold no vocabulary)")
    files = _stat(kind, path)
    return _opened(kind, path, str(data_cfg.tokenizer.path), cache_root(data_cfg), files)


@lru_cache(maxsize=4)
def _opened(kind: str, path: Path, tokenizer_path: str, cache: Path, files: tuple[int, int]) -> ForeignStore:
    """One ForeignStore per file, tokenizer and state of the file (a run opens it for each split; the pair's
    checks read its whole index)."""
    return ForeignStore(kind, path, tokenizer_path, cache)


@dataclass(frozen=True)
class ForeignShard(Shard):
    """The one shard of a foreign file: its ids memory-mapped where they are, its index arrays from the cached survey
    (``start`` is unused: there is no index file)."""

    ids_path: Path
    survey: Path

    @classmethod
    def of(cls, ids_path: Path, dtype: np.dtype, survey: Path, info: dict) -> ForeignShard:
        header = {"tokens": info["tokens"], "documents": info["documents"], "dtype": np.dtype(dtype).str}
        return cls(ids_path.with_suffix(""), header, 0, ids_path, survey)

    @cached_property
    def ids(self) -> np.ndarray:
        if self.header["tokens"] == 0:
            return np.zeros(0, self.header["dtype"])
        return np.asarray(np.memmap(self.ids_path, dtype=self.header["dtype"], mode="r"))

    def _map(self, name: str) -> np.ndarray:
        path = self.survey / f"{name}.npy"
        return np.asarray(np.load(path, mmap_mode="r")) if path.is_file() else np.zeros(0, np.int64)


class ForeignSplit(StoreSplit):
    """One foreign file as a store's split of one shard; ``separated``: every document already ends with the
    document separator (the layouts add none)."""

    def __init__(self, folder: Path, name: str, shard: ForeignShard, source: Path, separated: bool):
        self.folder, self.name, self.shards, self.separated = folder, name, [shard], separated
        self.info = {"sources": [{"path": str(source)}], "shards": 1, "tokens": shard.num_tokens,
                     "documents": shard.num_documents}  # fmt: skip


class ForeignStore:
    """A Megatron pair or a nanoGPT file (and its validation file) with the store's surface: ``tokenizer``,
    ``split(name)``, ``folder`` (where the layouts write their files: the cache) and ``fingerprint``."""

    def __init__(self, kind: str, path: Path, tokenizer_path: str, cache: Path):
        self.kind, self.path = kind, path
        self.tokenizer = load_tokenizer(tokenizer_path)
        self.separator = vocab_from_tokenizer(self.tokenizer).document_separator
        self.files = {"train": path}
        validation = _validation_beside(kind, path)
        if validation is not None:
            self.files["validation"] = validation
            log.info("%s: validation from %s", path, validation)
        self.fingerprint = stable_hash(
            kind, SURVEY_VERSION, self.separator, {name: _stat(kind, p) for name, p in self.files.items()}
        )
        self.folder = cache / "foreign" / self.fingerprint
        self.folder.mkdir(parents=True, exist_ok=True)
        size = self.tokenizer.get_vocab_size()
        self.manifest = {"settings": {"unit": "documents", "foreign": kind}, "vocab_size": size, "splits": {}}
        self._splits = {name: self._open(name, p, tokenizer_path) for name, p in self.files.items()}
        for name, split in self._splits.items():
            self.manifest["splits"][name] = {**split.info, "bytes": _stat(kind, self.files[name])[0]}

    def split(self, name: str) -> ForeignSplit | None:
        return self._splits.get(name)

    def _open(self, name: str, path: Path, tokenizer_path: str) -> ForeignSplit:
        if self.kind == "megatron":
            index = open_megatron(path)
            ids_path, dtype = index.bin, index.dtype
        else:
            check_nanogpt(path)
            ids_path, index, dtype = path, None, NANOGPT_DTYPE
        survey = written_once(self.folder / name, lambda into: _survey(into, ids_path, dtype, index, self.separator),
                              f"the survey of {ids_path}")  # fmt: skip
        info = json.loads((survey / "survey.json").read_text(encoding="utf-8"))
        vocab_size = self.tokenizer.get_vocab_size()
        if info["max_id"] >= vocab_size or info["min_id"] < 0:
            bad = info["max_id"] if info["max_id"] >= vocab_size else info["min_id"]
            raise DataError(
                f"{ids_path} holds token id {bad}, outside the {vocab_size} ids of data.tokenizer.path="
                f"{tokenizer_path}; give the tokenizer the ids come from"
            )
        return ForeignSplit(self.folder, name, ForeignShard.of(ids_path, dtype, survey, info), path, info["separated"])


def _stat(kind: str, path: Path) -> tuple[int, int]:
    files = [path.with_name(path.name + s) for s in (".bin", ".idx")] if kind == "megatron" else [path]
    stats = [f.stat() for f in files if f.is_file()]
    return sum(s.st_size for s in stats), max((s.st_mtime_ns for s in stats), default=0)


def foreign_split_file(store: Any, split: str) -> Path | None:
    """The file a foreign ``data.store`` reads ``split`` from (nanoGPT's val.bin beside its train.bin, a Megatron
    pair's prefix), None where it names no foreign file or has no such split."""
    found = foreign_kind(store)
    if found is None:
        return None
    kind, path = found
    return path if split == "train" else _validation_beside(kind, path)


def _validation_beside(kind: str, path: Path) -> Path | None:
    if "train" not in path.name:
        return None
    for name in _VALIDATION_NAMES:
        other = path.with_name(path.name.replace("train", name))
        if (other.with_name(other.name + ".idx") if kind == "megatron" else other).is_file():
            return other
    return None


def _survey(into: Path, ids_path: Path, dtype: np.dtype, index, separator: int) -> None:
    """One pass over the ids: the smallest and largest id, the document and sentence ends, and whether every
    document ends with ``separator``; written into ``into`` (arrays as .npy files, memory-mapped by the shard)."""
    tokens = ids_path.stat().st_size // np.dtype(dtype).itemsize
    ids = np.memmap(ids_path, dtype=dtype, mode="r") if tokens else np.zeros(0, dtype)
    low, high = 0, 0
    for lo in range(0, tokens, CHUNK):
        part = ids[lo : lo + CHUNK]
        low, high = min(low, int(part.min())), max(high, int(part.max()))
    if index is None:  # nanoGPT: a document ends after each separator (and at the file's end)
        with open(into / "document_ends.bin", "wb") as out:
            for lo in range(0, tokens, CHUNK):
                out.write((np.flatnonzero(ids[lo : lo + CHUNK] == separator) + lo + 1).astype(np.int64).tobytes())
        ends = np.fromfile(into / "document_ends.bin", np.int64)  # 8 bytes a document
        if tokens and (not len(ends) or ends[-1] != tokens):
            ends = np.append(ends, tokens)
        (into / "document_ends.bin").unlink()
        np.save(into / "document_ends.npy", ends)
        np.save(into / "document_sentences.npy", np.arange(1, len(ends) + 1, dtype=np.int64))
        np.save(into / "sentence_ends.npy", ends)
        separated = True
    else:  # Megatron: sequence ends, and the documents' ends among them
        lengths = index.array("sequence_lengths")
        sentence_ends = np.lib.format.open_memmap(into / "sentence_ends.npy", "w+", np.int64, (len(lengths),))
        done = 0
        for lo in range(0, len(lengths), CHUNK):
            part = np.cumsum(np.asarray(lengths[lo : lo + CHUNK], np.int64)) + done
            sentence_ends[lo : lo + len(part)] = part
            done = int(part[-1]) if len(part) else done
        sentence_ends.flush()
        per_document = np.asarray(index.array("document_indices")[1:], np.int64)
        np.save(into / "document_sentences.npy", per_document)
        ends = np.zeros(len(per_document), np.int64)
        closed = per_document > 0  # a document index of 0: an empty document before any sequence
        ends[closed] = sentence_ends[per_document[closed] - 1]
        starts = np.concatenate([[0], ends[:-1]])
        np.save(into / "document_ends.npy", ends)
        filled = ends > starts
        separated = bool(filled.any()) and bool(np.all(np.asarray(ids[ends[filled] - 1]) == separator))
    info = {"tokens": tokens, "documents": len(ends), "min_id": low, "max_id": high, "separated": separated}
    (into / "survey.json").write_text(json.dumps(info), encoding="utf-8")
