"""A token store (``data/store/token_store.py``) written as Megatron-LM's or nanoGPT's token files (``data/store/token_files.py``), so
that a corpus prepared here trains in those toolkits: ``plm-export STORE OUT --format megatron`` or ``--format
nanogpt``.

- megatron: ``OUT/train.bin`` + ``OUT/train.idx`` (and ``OUT/validation.*``), what megatron-core's
  ``IndexedDataset("OUT/train")`` reads: one sequence per sentence where the store keeps sentence boundaries (as
  ``preprocess_data.py --split-sentences`` writes), else per document; the document separator (GPT-2's
  end-of-text, else [SEP] or </s>) after every document, as ``--append-eod`` does for GPT training, unless
  ``eod=False`` (``--no-eod``);
- nanogpt: ``OUT/train.bin`` and ``OUT/val.bin``, flat uint16 ids, every document followed by the separator, as
  nanoGPT's prepare.py writes them (a vocabulary over 65,536 ids does not fit and is refused).

Shard by shard (at most data.shard_bytes of text each): memory stays flat whatever the corpus's size.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from plm_toolkit.core.errors import CheckpointError, DataError
from plm_toolkit.data.store.token_files import NANOGPT_DTYPE, MegatronWriter, megatron_dtype
from plm_toolkit.data.store.token_store import TokenStore
from plm_toolkit.data.tokenization.tokenizer import vocab_from_tokenizer
from plm_toolkit.data.tokenization.vocab import Vocab

STORE_FORMATS = ("megatron", "nanogpt")
_NANOGPT_NAMES = {"train": "train.bin", "validation": "val.bin"}


def open_store(folder: Path) -> TokenStore:
    """The finished store at ``folder``, else an error naming what plm-export expected there."""
    if not (folder / "manifest.json").is_file():
        raise CheckpointError(
            f"{folder}: no token store here (a folder plm-prepare wrote, holding manifest.json); --format megatron and "
            "--format nanogpt export a token store"
        )
    store = TokenStore(folder)
    if store.manifest["settings"].get("unit") == "pairs":
        raise DataError(f"{folder} holds sentence pairs for translation; Megatron-LM and nanoGPT files hold one text")
    return store


def write_token_files(folder: Path, into: Path, fmt: str, eod: bool = True) -> dict[str, dict]:
    """Write the store at ``folder`` into the folder ``into`` as ``fmt``; returns each split's counts."""
    store = open_store(folder)
    vocab: Vocab = vocab_from_tokenizer(store.tokenizer)
    separator = vocab.document_separator if eod or fmt == "nanogpt" else None
    size = store.tokenizer.get_vocab_size()
    if fmt == "nanogpt" and size > 1 << 16:
        raise DataError(f"{folder}: a vocabulary of {size} ids does not fit nanoGPT's uint16 files (65,536 at most)")
    counts = {}
    for name in store.manifest["splits"]:
        split = store.split(name)
        if fmt == "megatron":
            writer = MegatronWriter(into / name, megatron_dtype(size))
            for shard in split.shards:
                writer.add(*_megatron_sequences(shard, separator))
            writer.finish()
        else:
            with open(into / _NANOGPT_NAMES[name], "wb") as out:
                for shard in split.shards:
                    out.write(_with_separators(shard, separator).astype(NANOGPT_DTYPE).tobytes())
        counts[name] = {"tokens": split.num_tokens + (split.num_documents if separator is not None else 0),
                        "documents": split.num_documents}  # fmt: skip
    return counts


def _with_separators(shard, separator: int | None) -> np.ndarray:
    """The shard's ids with ``separator`` after every document (none where it is None)."""
    ids = np.asarray(shard.ids)
    if separator is None:
        return ids
    return np.insert(ids, np.asarray(shard.array("document_ends"), np.int64), separator)


def _megatron_sequences(shard, separator: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids, sequence lengths, sequences closed at each document's end) of one shard."""
    document_ends = np.asarray(shard.array("document_ends"), np.int64)
    sentence_ends = np.asarray(shard.array("sentence_ends"), np.int64)
    if len(sentence_ends):
        ends, per_document = sentence_ends, np.asarray(shard.array("document_sentences"), np.int64)
    else:
        ends, per_document = document_ends, np.arange(1, len(document_ends) + 1, dtype=np.int64)
    lengths = np.diff(np.concatenate([[0], ends]))
    if separator is not None and len(per_document):
        np.add.at(lengths, per_document[per_document > 0] - 1, 1)  # the separator ends each document's last sequence
    return _with_separators(shard, separator), lengths, per_document
