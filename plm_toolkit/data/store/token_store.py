"""The token store: a corpus tokenized once into shards of memory-mapped token ids, with an index of document and
sentence boundaries, the tokenizer and a manifest. Layouts (``data/layouts/windows.py``) cut their examples from it on
the fly, without loading it.

A store is a folder::

    manifest.json          format version, every setting that changes the ids, the corpus fingerprint, the counts
    tokenizer.json         the tokenizer the ids come from
    train/00000.bin        token ids of shard 0, documents back to back, little-endian uint16 (uint32 when the
    train/00000.idx        vocabulary has more than 65,536 tokens); its index (below)
    validation/...

An index file is ``PLMSTORE`` (8 bytes), a little-endian uint32 format version, a uint32 header length, the header
(UTF-8 JSON: counts, what the shard was read from and the arrays that follow, each with its dtype, length and
byte offset), then the arrays, each starting at a multiple of 8 bytes:
- ``document_ends`` (int64): the token position where each document ends (cumulative, so document d covers
  ``[document_ends[d - 1], document_ends[d])``), as Megatron-LM's document index does;
- ``sentence_ends`` (int64) and ``document_sentences`` (int64, cumulative sentence counts at each document's end),
  for stores prepared with sentence boundaries;
- ``unknown_positions`` (int64), ``unknown_ends`` (int64) and ``unknown_text`` (uint8): the spelling (UTF-8) of
  every token the vocabulary maps to unk, for ELMo's character CNN (``data/tokenization/spellings.py``);
- ``units`` (int8, one per token): the join code of every token of a store of ERNIE's knowledge units
  (``data/units/knowledge.py``).
A shard is written under temporary names, synced and renamed, its index last: a shard whose index exists is whole.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from array import array
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from plm_toolkit.core.atomic import write_text
from plm_toolkit.core.errors import DataError

MAGIC = b"PLMSTORE"
INDEX_VERSION = 1
MANIFEST = "manifest.json"
_FLUSH_TOKENS = 1 << 20  # token ids buffered before a write


def id_dtype(vocab_size: int) -> np.dtype:
    """uint16 where every id fits (vocabularies up to 65,536 tokens), else uint32."""
    return np.dtype("<u2") if vocab_size <= 1 << 16 else np.dtype("<u4")


def sync_rename(temporary: Path, final: Path) -> None:
    """Flush ``temporary`` to disk and give it its final name (the folder entry synced too)."""
    with open(temporary, "rb") as f:
        os.fsync(f.fileno())
    os.replace(temporary, final)
    directory = os.open(final.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


class ShardWriter:
    """Writes one shard: tokens sentence by sentence, a document end after each document's last sentence."""

    def __init__(self, stem: Path, dtype: np.dtype, sentences: bool, spellings: bool, codes: bool = False):
        self.stem, self.dtype = stem, np.dtype(dtype)
        self.temporary = stem.with_name(f".{stem.name}.{os.getpid()}.tmp")
        self.ids_file = open(self.temporary.with_suffix(".bin"), "wb")  # noqa: SIM115 - closed in finish()
        self.buffer = array("H" if self.dtype.itemsize == 2 else "I")
        self.crc32 = 0  # of the ids written: checked when the store is opened (data/store/check.py)
        self.tokens = 0  # written and buffered
        self.document_start = 0
        self.arrays: dict[str, array] = {"document_ends": array("q")}
        if sentences:
            self.arrays.update(sentence_ends=array("q"), document_sentences=array("q"))
        self.spelled = spellings
        if spellings:
            self.arrays.update(unknown_positions=array("q"), unknown_ends=array("q"), unknown_text=array("B"))
        if codes:
            self.arrays["units"] = array("b")

    def add_sentence(self, ids, spellings: list[tuple[int, str]] = (), codes=None) -> None:
        """Append one sentence's ids; ``spellings``: (position in the sentence, text) of its unk tokens; ``codes``:
        the join code of each of its tokens (a store of knowledge units)."""
        if codes is not None:
            self.arrays["units"].extend(codes)
        if self.spelled:
            for position, text in spellings:
                self.arrays["unknown_positions"].append(self.tokens + position)
                self.arrays["unknown_text"].frombytes(text.encode("utf-8"))
                self.arrays["unknown_ends"].append(len(self.arrays["unknown_text"]))
        self.buffer.extend(ids)
        self.tokens += len(ids)
        if "sentence_ends" in self.arrays:
            self.arrays["sentence_ends"].append(self.tokens)
        if len(self.buffer) >= _FLUSH_TOKENS:
            self._flush()

    def end_document(self, keep_empty: bool = False) -> None:
        """Close the current document; one that got no token is dropped, unless ``keep_empty``."""
        if self.tokens > self.document_start or keep_empty:
            self.arrays["document_ends"].append(self.tokens)
            if "document_sentences" in self.arrays:
                self.arrays["document_sentences"].append(len(self.arrays["sentence_ends"]))
        self.document_start = self.tokens

    def _flush(self) -> None:
        if self.buffer.itemsize != self.dtype.itemsize:  # array's "I" is 4 bytes on every platform we run on
            raise RuntimeError("unexpected array item size")
        data = self.buffer.tobytes()
        self.crc32 = zlib.crc32(data, self.crc32)
        self.ids_file.write(data)
        del self.buffer[:]

    def finish(self, header: dict) -> dict:
        """Write the index and give both files their final names; returns the shard's header."""
        self.end_document()
        self._flush()
        self.ids_file.close()
        header = {
            **header,
            "dtype": self.dtype.str,
            "ids_crc32": self.crc32,
            "tokens": self.tokens,
            "documents": len(self.arrays["document_ends"]),
            "sentences": len(self.arrays.get("sentence_ends", ())),
        }
        index = self.temporary.with_suffix(".idx")
        write_index(index, header, {name: np.frombuffer(values, _NUMPY[values.typecode]) for name, values in
                                    self.arrays.items()})  # fmt: skip
        sync_rename(self.temporary.with_suffix(".bin"), self.stem.with_suffix(".bin"))
        sync_rename(index, self.stem.with_suffix(".idx"))
        return header

    def abandon(self) -> None:
        """Remove the temporary files of a shard that will not be finished."""
        self.ids_file.close()
        for suffix in (".bin", ".idx"):
            self.temporary.with_suffix(suffix).unlink(missing_ok=True)


_NUMPY = {"q": np.int64, "B": np.uint8, "b": np.int8}


def write_index(path: Path, header: dict, arrays: dict[str, np.ndarray]) -> None:
    """An index file: magic, version, the JSON header (with each array's place), the arrays 8-byte aligned."""
    places, offset = {}, 0
    for name, values in arrays.items():
        places[name] = {"dtype": values.dtype.str, "length": len(values), "offset": offset}
        offset += -(-values.nbytes // 8) * 8
    text = json.dumps({**header, "arrays": places}, sort_keys=True).encode("utf-8")
    text += b" " * (-(len(MAGIC) + 8 + len(text)) % 8)
    with open(path, "wb") as f:
        f.write(MAGIC + struct.pack("<II", INDEX_VERSION, len(text)) + text)
        for values in arrays.values():
            data = np.ascontiguousarray(values).tobytes()
            f.write(data + b"\0" * (-len(data) % 8))


@dataclass(frozen=True)
class Shard:
    """One shard, memory-mapped: ``ids`` and the index arrays (file-backed: nothing is read until used)."""

    stem: Path
    header: dict
    start: int  # bytes where the arrays begin in the index file

    @classmethod
    def open(cls, stem: Path) -> Shard:
        """The shard at ``stem`` (.bin and .idx); DataError naming the file when one is missing or truncated."""
        index = stem.with_suffix(".idx")
        if not index.is_file():
            raise DataError(f"token store shard {index} is missing")
        with open(index, "rb") as f:
            head = f.read(len(MAGIC) + 8)
            if len(head) < len(MAGIC) + 8 or head[: len(MAGIC)] != MAGIC:
                raise DataError(f"{index} is not a token store index (no {MAGIC.decode()} header)")
            version, length = struct.unpack("<II", head[len(MAGIC) :])
            if version != INDEX_VERSION:
                raise DataError(f"{index}: index format {version}; this plm_toolkit reads {INDEX_VERSION}")
            try:
                header = json.loads(f.read(length))
            except (ValueError, UnicodeDecodeError):
                raise DataError(f"{index} is truncated (its header does not parse)") from None
        if not isinstance(header, dict) or any(key not in header for key in ("arrays", "tokens", "dtype")):
            raise DataError(f"{index}: its header is not a shard's (no arrays, tokens and dtype)")
        start = len(MAGIC) + 8 + length
        expected = start + sum(-(-p["length"] * np.dtype(p["dtype"]).itemsize // 8) * 8 for p in
                               header["arrays"].values())  # fmt: skip
        if index.stat().st_size < expected:
            raise DataError(f"{index} is truncated ({index.stat().st_size} bytes, expected {expected})")
        ids = stem.with_suffix(".bin")
        size = header["tokens"] * np.dtype(header["dtype"]).itemsize
        if not ids.is_file():
            raise DataError(f"token store shard {ids} is missing")
        if ids.stat().st_size != size:
            raise DataError(f"token store shard {ids} is truncated ({ids.stat().st_size} bytes, expected {size})")
        return cls(stem, header, start)

    @cached_property
    def ids(self) -> np.ndarray:
        if self.header["tokens"] == 0:
            return np.zeros(0, self.header["dtype"])
        return np.asarray(np.memmap(self.stem.with_suffix(".bin"), dtype=self.header["dtype"], mode="r"))

    def array(self, name: str) -> np.ndarray:
        """An index array (read-only, memory-mapped once); an empty one where the shard has none of that name."""
        arrays = self.__dict__.setdefault("_arrays", {})
        if name not in arrays:
            arrays[name] = self._map(name)
        return arrays[name]

    def __getstate__(self) -> dict:
        """Pickled without its memory maps (a data-loader worker maps the files again)."""
        return {k: v for k, v in self.__dict__.items() if k not in ("ids", "_arrays")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    def _map(self, name: str) -> np.ndarray:
        place = self.header["arrays"].get(name)
        if place is None or place["length"] == 0:
            return np.zeros(0, np.int64)
        # Plain ndarray views of the maps: indexing them costs no Python-level memmap bookkeeping.
        return np.asarray(
            np.memmap(
                self.stem.with_suffix(".idx"),
                dtype=place["dtype"],
                mode="r",
                offset=self.start + place["offset"],
                shape=(place["length"],),
            )
        )

    @property
    def num_tokens(self) -> int:
        return self.header["tokens"]

    @property
    def num_documents(self) -> int:
        return self.header["documents"]


class DamagedStore(DataError):
    """A finished store whose files are not what plm-prepare wrote (``damaged``); ``what`` says what is wrong."""

    what = ""


def damaged(folder: Path, what: str) -> DamagedStore:
    """The one line for a damaged store: what is wrong, and what to do (plm-prepare repairs a store:
    ``data/store/repair.py``)."""
    err = DamagedStore(
        f"{what}: the token store {folder} is damaged; plm-prepare with the overrides that prepared it repairs it "
        "(the shards that check out are kept)"
    )
    err.what = what
    return err


# What every manifest holds (a manifest without them was cut short or written by something else).
_MANIFEST_KEYS = ("settings", "splits", "vocab_size", "fingerprint")


def read_manifest(folder: Path) -> dict | None:
    """The manifest of a finished store, or None where there is none yet; DamagedStore where it does not parse."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise damaged(Path(folder), f"{path} does not parse") from None
    if not isinstance(manifest, dict):
        raise damaged(Path(folder), f"{path} is not a JSON object")
    missing = [key for key in _MANIFEST_KEYS if key not in manifest]
    if missing:
        raise damaged(Path(folder), f"{path} lacks {', '.join(missing)}")
    splits = manifest["splits"]
    if not isinstance(splits, dict) or not all(isinstance(v, dict) and isinstance(v.get("shards"), int) for v in
                                               splits.values()):  # fmt: skip
        raise damaged(Path(folder), f"{path} does not give each split's number of shards")
    return manifest


def write_json(path: Path, value: dict) -> None:
    """``value`` as JSON at ``path``, written to a temporary name, synced and renamed."""
    write_text(path, json.dumps(value, indent=1, sort_keys=True) + "\n", sync=True)


class StoreSplit:
    """One split of a store: its shards, memory-mapped, in corpus order."""

    def __init__(self, folder: Path, name: str, info: dict):
        self.folder, self.name, self.info = Path(folder), name, info
        self.shards = [Shard.open(folder / name / f"{k:05d}") for k in range(info["shards"])]

    @property
    def num_tokens(self) -> int:
        return sum(s.num_tokens for s in self.shards)

    @property
    def num_documents(self) -> int:
        return sum(s.num_documents for s in self.shards)

    @cached_property
    def _document_offsets(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum([s.num_documents for s in self.shards])]).astype(np.int64)

    def documents(self, column: str = "sentences"):
        """Each document in order as a list of sentences: token-id lists (``sentences``), the spellings of their
        unk tokens (``unknown``) or their tokens' join codes (``units``, a store of knowledge units). A store
        without sentence starts gives each document as one sentence."""
        for shard in self.shards:
            for document in range(shard.num_documents):
                yield _document(shard, document, column)

    def document(self, index: int, column: str = "sentences") -> list:
        """Document ``index`` (counted over the whole split) as ``documents`` gives it."""
        number = int(np.searchsorted(self._document_offsets, index, side="right")) - 1
        return _document(self.shards[number], index - int(self._document_offsets[number]), column)


def _document(shard: Shard, document: int, column: str) -> list:
    sentence_ends = shard.array("sentence_ends")
    if len(sentence_ends):
        per_document = shard.array("document_sentences")
        first, last = (int(per_document[document - 1]) if document else 0), int(per_document[document])
    else:
        sentence_ends, first, last = shard.array("document_ends"), document, document + 1
    bounds = [int(sentence_ends[first - 1]) if first else 0, *sentence_ends[first:last].tolist()]
    if column == "unknown":
        spellings = _Spellings(shard)
        return [spellings.between(a, b) for a, b in zip(bounds, bounds[1:], strict=False)]
    values = shard.array("units") if column == "units" else shard.ids
    return [values[a:b].tolist() for a, b in zip(bounds, bounds[1:], strict=False)]


class _Spellings:
    """The spellings of a shard's unk tokens, by token position."""

    def __init__(self, shard: Shard):
        self.positions = shard.array("unknown_positions")
        self.ends = shard.array("unknown_ends")
        self.text = shard.array("unknown_text")

    def between(self, start: int, stop: int) -> list[str]:
        """The spellings of the unk tokens at positions [start, stop), in order."""
        lo, hi = (int(k) for k in np.searchsorted(self.positions, [start, stop]))
        ends = self.ends[max(lo - 1, 0) : hi].tolist()
        starts = ([0] if lo == 0 else []) + ends
        return [bytes(self.text[a:b]).decode("utf-8") for a, b in zip(starts, ends[lo > 0 :], strict=False)]


class TokenStore:
    """A finished store: its manifest, tokenizer and splits."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        manifest = read_manifest(self.folder)
        if manifest is None:
            raise DataError(f"{self.folder} is not a finished token store (no {MANIFEST}); prepare it with plm-prepare")
        self.manifest = manifest
        self.tokenizer = Tokenizer.from_file(str(self.folder / "tokenizer.json"))
        self.tokenizer.no_padding()  # a store written before load_tokenizer cleared them
        self.tokenizer.no_truncation()

    def split(self, name: str) -> StoreSplit | None:
        info = self.manifest["splits"].get(name)
        return None if info is None else StoreSplit(self.folder, name, info)

    @property
    def fingerprint(self) -> str:
        return self.manifest["fingerprint"]
