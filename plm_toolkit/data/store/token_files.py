"""Megatron-LM's and nanoGPT's token files, read and written as those toolkits do.

Megatron-LM (megatron-core's ``IndexedDataset``, once ``MMapIndexedDataset``): ``PREFIX.bin`` holds the ids of every
sequence back to back; ``PREFIX.idx`` is ``MMIDIDX\\0\\0`` (9 bytes), the version (uint64, 1), the ids' dtype code
(uint8: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16), the sequence count S and the
document-index count D (uint64 each), then S sequence lengths (int32), S byte offsets into the .bin (int64) and D
document indices (int64: 0, then the sequence count at each document's end), all little-endian; a multimodal index
has S mode bytes after them. A sequence is a document, or a sentence where ``preprocess_data.py --split-sentences``
cut the documents (the document indices then group them).

nanoGPT (``data/openwebtext/prepare.py``): ``train.bin`` and ``val.bin`` are flat uint16 GPT-2 ids, every document
followed by the end-of-text id (50256), nothing else.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from plm_toolkit.core.errors import DataError

MEGATRON_MAGIC = b"MMIDIDX\x00\x00"
_MEGATRON_HEAD = struct.Struct("<9sQBQQ")  # magic, version, dtype code, sequence count, document-index count
# megatron.core.datasets.indexed_dataset.DType; float codes are not token ids and are refused.
MEGATRON_DTYPES = {1: "u1", 2: "i1", 3: "<i2", 4: "<i4", 5: "<i8", 8: "<u2"}
MEGATRON_CODES = {np.dtype(v).str: k for k, v in MEGATRON_DTYPES.items()}
NANOGPT_DTYPE = np.dtype("<u2")
CHUNK = 1 << 22  # ids (or index entries) handled at a time: constant memory whatever the file's size


def megatron_dtype(vocab_size: int) -> np.dtype:
    """The ids' dtype megatron-core's ``DType.optimal_dtype`` picks: uint16 below 65,500 tokens, else int32."""
    return np.dtype("<u2") if vocab_size < 65500 else np.dtype("<i4")


def is_megatron_index(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(MEGATRON_MAGIC)) == MEGATRON_MAGIC
    except OSError:
        return False


@dataclass(frozen=True)
class MegatronIndex:
    """A checked Megatron pair: the ids' dtype and where each index array sits in the .idx file."""

    prefix: Path
    dtype: np.dtype
    sequences: int
    documents: int  # document indices, the leading 0 included (documents + 1)
    start: int = _MEGATRON_HEAD.size

    @property
    def bin(self) -> Path:
        return self.prefix.with_name(self.prefix.name + ".bin")

    @property
    def idx(self) -> Path:
        return self.prefix.with_name(self.prefix.name + ".idx")

    def array(self, name: str) -> np.ndarray:
        """``sequence_lengths``, ``sequence_pointers`` or ``document_indices``, memory-mapped."""
        offset = self.start + {"sequence_lengths": 0, "sequence_pointers": 4, "document_indices": 12}[name] * (
            self.sequences
        )
        count = self.documents if name == "document_indices" else self.sequences
        if count == 0:
            return np.zeros(0, np.int64)
        dtype = "<i4" if name == "sequence_lengths" else "<i8"
        return np.memmap(self.idx, dtype=dtype, mode="r", offset=offset, shape=(count,))


def open_megatron(prefix: Path) -> MegatronIndex:
    """The index of the pair at ``prefix`` once its .idx parses and agrees with its .bin, else DataError naming the
    file and what differs."""
    index = MegatronIndex(prefix, np.dtype("u1"), 0, 0)
    idx, bin_ = index.idx, index.bin
    for path in (idx, bin_):
        if not path.is_file():
            raise DataError(f"{path} is missing: a Megatron-LM token file is a PREFIX.bin and PREFIX.idx pair")
    with open(idx, "rb") as f:
        head = f.read(_MEGATRON_HEAD.size)
    if len(head) < _MEGATRON_HEAD.size or not head.startswith(MEGATRON_MAGIC):
        raise DataError(f"{idx} is not a Megatron-LM index (no MMIDIDX header)")
    _, version, code, sequences, documents = _MEGATRON_HEAD.unpack(head)
    if version != 1:
        raise DataError(f"{idx}: index version {version}; Megatron-LM's format (and this reader) is version 1")
    if code not in MEGATRON_DTYPES:
        raise DataError(f"{idx}: dtype code {code} is not an integer type of token ids (expected 1-5 or 8)")
    index = MegatronIndex(prefix, np.dtype(MEGATRON_DTYPES[code]), sequences, documents)
    size, arrays = idx.stat().st_size, _MEGATRON_HEAD.size + 12 * sequences + 8 * documents
    if size not in (arrays, arrays + sequences):  # with or without a multimodal index's mode bytes
        raise DataError(
            f"{idx} holds {size} bytes; its header ({sequences} sequences, {documents} document indices) needs "
            f"{arrays}: the index is truncated or not Megatron-LM's"
        )
    boundaries = index.array("document_indices")
    if documents < 1 or boundaries[0] != 0 or boundaries[-1] != sequences or np.any(np.diff(boundaries) < 0):
        raise DataError(f"{idx}: its document indices do not run from 0 to its {sequences} sequences in order")
    lengths, pointers = index.array("sequence_lengths"), index.array("sequence_pointers")
    tokens = 0
    for lo in range(0, sequences, CHUNK):
        part = np.asarray(lengths[lo : lo + CHUNK], np.int64)
        if np.any(part < 0):
            raise DataError(f"{idx}: a negative sequence length near sequence {lo}")
        expected = (tokens + np.cumsum(part) - part) * index.dtype.itemsize
        wrong = np.flatnonzero(np.asarray(pointers[lo : lo + CHUNK]) != expected)
        if len(wrong):
            raise DataError(
                f"{idx}: sequence {lo + int(wrong[0])} starts at byte {int(pointers[lo + int(wrong[0])])} of {bin_}, "
                f"not {int(expected[wrong[0]])} where the sequences before it end: the .idx and the .bin disagree"
            )
        tokens += int(part.sum())
    if bin_.stat().st_size != tokens * index.dtype.itemsize:
        raise DataError(
            f"{bin_} holds {bin_.stat().st_size} bytes, but {idx} describes {tokens} ids of {index.dtype.itemsize} "
            f"byte(s) ({tokens * index.dtype.itemsize} bytes): the .idx and the .bin disagree (a pair from two runs, "
            "or a copy cut short)"
        )
    return index


def check_nanogpt(path: Path) -> int:
    """The number of ids in nanoGPT's ``path``, else DataError (missing, or not whole uint16 ids)."""
    if not path.is_file():
        raise DataError(f"{path} is missing (nanoGPT's token file: flat uint16 ids)")
    size = path.stat().st_size
    if size == 0:
        raise DataError(f"{path} is empty (0 bytes); nanoGPT's .bin holds uint16 token ids, 2 bytes each")
    if size % NANOGPT_DTYPE.itemsize:
        raise DataError(
            f"{path} holds {size} bytes, an odd number: nanoGPT's .bin is uint16 token ids, 2 bytes each (a copy cut "
            "short, or another format)"
        )
    return size // NANOGPT_DTYPE.itemsize


class MegatronWriter:
    """Writes a Megatron pair as megatron-core's ``IndexedDatasetBuilder`` does: sequences added one at a time,
    ``end_document`` after a document's last; ``finish`` writes the index. Files go to temporary names first."""

    def __init__(self, prefix: Path, dtype: np.dtype):
        self.prefix, self.dtype = prefix, np.dtype(dtype)
        self.bin = prefix.with_name(prefix.name + ".bin")
        self.ids = open(self.bin, "wb")  # noqa: SIM115 - closed in finish()
        self.lengths, self.document_indices = [np.zeros(0, np.int32)], [np.zeros(1, np.int64)]
        self.sequences = 0

    def add(self, ids: np.ndarray, lengths: np.ndarray, document_ends: np.ndarray) -> None:
        """Sequences of ``lengths`` ids back to back in ``ids``; ``document_ends``: how many of them have ended a
        document once each of the documents these sequences close is closed (cumulative, from this call's first)."""
        self.ids.write(np.ascontiguousarray(ids, self.dtype).tobytes())
        self.lengths.append(np.asarray(lengths, np.int32))
        self.document_indices.append(self.sequences + np.asarray(document_ends, np.int64))
        self.sequences += len(lengths)

    def finish(self) -> None:
        self.ids.close()
        lengths = np.concatenate(self.lengths)
        documents = np.concatenate(self.document_indices)
        pointers = (np.cumsum(lengths, dtype=np.int64) - lengths) * self.dtype.itemsize
        head = _MEGATRON_HEAD.pack(MEGATRON_MAGIC, 1, MEGATRON_CODES[self.dtype.str], len(lengths), len(documents))
        with open(self.prefix.with_name(self.prefix.name + ".idx"), "wb") as f:
            f.write(head + lengths.tobytes() + pointers.tobytes() + documents.tobytes())
