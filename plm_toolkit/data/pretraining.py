"""Pretraining examples: tokenized sentences packed into BERT sentence pairs, ALBERT segment pairs, RoBERTa
full-sentence blocks, or windows of one long token stream (Transformer-XL / XLNet segments, consumed in order by the
loader).

Two cached steps, both keyed on the corpus contents and every setting that changes their output:
1. `<cache_dir>/tokenized/<key>.arrow`: one row per non-empty document, its sentences as token ids.
2. `<cache_dir>/examples/<key>.arrow`: the examples, `input_ids` and `token_type_ids` (+ `next_sentence_label`).
A second run with the same corpus, tokenizer and settings memory-maps both files instead of rebuilding them.
Masking is not done here: objectives mask each batch afresh (RoBERTa's dynamic masking, section 4.1).
"""

from __future__ import annotations

import logging
import os
import random
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
from tokenizers import Tokenizer

from plm_toolkit.data.corpus import (
    cache_root,
    choice,
    read_documents,
    stable_hash,
)
from plm_toolkit.data.plan import LAYOUTS, STREAM_LAYOUTS
from plm_toolkit.data.preparation import prepare_store
from plm_toolkit.data.sentence_pairs import (
    LONG_SENTENCE_PAIRS,
    SplitDocuments,
    document_pairs,
    split_long_sentences,
)
from plm_toolkit.data.sentence_streams import sentence_stream_windows
from plm_toolkit.data.store import TokenStore
from plm_toolkit.data.template import Template, template_of
from plm_toolkit.data.unit_corpus import tokenize_with_units, unit_documents, wrap_with_codes
from plm_toolkit.data.units import NONE as NO_UNIT
from plm_toolkit.data.vocab import Vocab
from plm_toolkit.errors import DataError

PAIR_LAYOUTS = ("sentence_pairs", "segment_pairs")
# Bump when a change to this file or to the sentence splitter changes what the cached files hold.
FORMAT_VERSION = 3
# Layouts that read running text: each document is tokenized whole, as written (streams need no sentences).
RUNNING_TEXT_LAYOUTS = ("streams", "full_sentences")
_BATCH = 256  # documents per map batch

logger = logging.getLogger(__name__)


def build_pretraining_examples(
    data_cfg: Any,
    tokenizer: Tokenizer,
    vocab: Vocab,
    layout: Any,
    split: str,
    seed: int,
    window: tuple[int, int] | None = None,
    units: Any = None,
    spellings: bool = False,
) -> datasets.Dataset | None:
    """The examples of `split` in `layout`, or None when the split has no source. Deterministic given `seed`.

    ``window`` = (length, stride) of the stream layouts; default (max_seq_len + 1, max_seq_len): inputs and
    next-token targets of consecutive segments. ``units``: where knowledge units come from (an objective config,
    ``data/unit_corpus.py``); the full-sentences examples then carry a ``units`` column, a join code per token.
    ``spellings``: the sentence-streams examples also carry the spelling of every unk token (``data/spellings.py``).
    """
    layout = choice(layout)
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if data_cfg.max_seq_len < 8:
        raise DataError(f"data.max_seq_len={data_cfg.max_seq_len} is too short; expected at least 8 tokens")
    if units is not None and layout != "full_sentences":
        raise DataError(f"knowledge units travel with full_sentences packing only, not {layout}")
    if spellings and layout != "sentence_streams":
        raise ValueError(f"token spellings travel with sentence_streams packing only, not {layout}")
    unk_id = vocab.require("unk_id", "keeping the spelling of unknown words") if spellings else None
    if units is not None:
        documents = read_documents(data_cfg, split)
        if documents is None:
            return None
        source = documents.source
        tokenized = tokenize_with_units(documents, tokenizer, data_cfg, units)
    else:
        store = TokenStore(prepare_store(data_cfg, store_unit(layout), spellings))
        if store.tokenizer.to_str() != tokenizer.to_str():
            raise DataError(f"the token store {store.folder} holds another tokenizer than the one given")
        part = store.split(split)
        if part is None:
            return None
        source = ", ".join(s["path"] for s in part.info["sources"])
        tokenized = _tokenized(part, spellings, cache_root(data_cfg) / "tokenized" / f"store-{store.fingerprint}")
    settings = (layout, int(data_cfg.max_seq_len), FORMAT_VERSION, int(seed))
    if layout in PAIR_LAYOUTS:
        settings += (float(data_cfg.short_seq_prob), float(data_cfg.random_next_prob))
    if layout in STREAM_LAYOUTS:
        window = window or (int(data_cfg.max_seq_len) + 1, int(data_cfg.max_seq_len))
        settings += tuple(window)
    path = cache_root(data_cfg) / "examples" / f"{stable_hash(tokenized._fingerprint, settings)}.arrow"
    if layout == "segment_pairs":
        return _sentence_pairs(tokenized, vocab, data_cfg, seed, path, contiguous=True)
    if layout == "sentence_pairs":
        if len(tokenized) < 2:
            logger.warning(
                "%s holds one document: random next sentences come from elsewhere in that document; separate "
                "documents with a blank line for proper NSP negatives",
                source,
            )
        return _sentence_pairs(tokenized, vocab, data_cfg, seed, path)
    if layout == "streams":
        return _stream_windows(tokenized, vocab, window[0], window[1], path)
    if layout == "sentence_streams":
        markers = (
            vocab.require("bos_id", "ELMo's sentence streams"),
            vocab.require("eos_id", "ELMo's sentence streams"),
        )
        unknown = _iter_documents(tokenized, "unknown") if spellings else None
        return sentence_stream_windows(_iter_documents(tokenized), *markers, *window, path, unknown, unk_id)
    single = template_of(tokenizer, pair=False)
    return _full_sentences(tokenized, single, vocab.document_separator, int(data_cfg.max_seq_len), path)


# --- step 1: the token store's documents as rows ----------------------------------------------------------


def store_unit(layout: str) -> str:
    """What a layout needs the store to hold (``data/shard_worker.py``): running text for streams, running text
    with sentence starts for full sentences, sentences one by one for the sentence layouts."""
    return {"streams": "documents", "full_sentences": "document_sentences"}.get(layout, "sentences")


def _tokenized(part: Any, spellings: bool, stem: Path) -> datasets.Dataset:
    """One row per document of a store split: `sentences` (token-id lists), with `unknown` (each sentence's unk
    spellings) where asked; written once with pyarrow in one pass."""
    path = stem.with_name(f"{stem.name}-{part.name}{'-spelled' if spellings else ''}.arrow")
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        fields = [("sentences", pa.list_(pa.list_(pa.int32())))]
        fields += [("unknown", pa.list_(pa.list_(pa.string())))] if spellings else []
        schema = pa.schema(fields)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        columns = [part.documents()] + ([part.documents("unknown")] if spellings else [])
        with pa.OSFile(str(temporary), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
            rows: list[tuple] = []
            for row in zip(*columns, strict=True):
                rows.append(row)
                if len(rows) == 1000:
                    writer.write_batch(_rows(rows, schema))
                    rows = []
            if rows:
                writer.write_batch(_rows(rows, schema))
        os.replace(temporary, path)
    return datasets.Dataset.from_file(str(path))


def _rows(rows: list[tuple], schema: pa.Schema) -> pa.RecordBatch:
    return pa.record_batch([pa.array([r[k] for r in rows], f.type) for k, f in enumerate(schema)], schema)


# --- step 2a: BERT sentence pairs --------------------------------------------------------------------------


def _sentence_pairs(
    tokenized: datasets.Dataset, vocab: Vocab, data_cfg: Any, seed: int, path: Path, contiguous: bool = False
) -> datasets.Dataset:
    """``[CLS] A [SEP] B [SEP]`` with token types 0 / 1, whatever the tokenizer's own pair template: this is the
    input format of the segment objectives (NSP, SOP), whose sentence-order swap relies on it."""
    cls_id = vocab.require("cls_id", "a sentence-pair layout ([CLS] A [SEP] B [SEP])")
    sep_id = vocab.require("sep_id", "a sentence-pair layout ([CLS] A [SEP] B [SEP])")
    max_seq_len = int(data_cfg.max_seq_len)
    short_seq_prob = float(data_cfg.short_seq_prob)
    random_next_prob = float(data_cfg.random_next_prob)

    long_sentences = 0
    documents = SplitDocuments(tokenized, max_seq_len - 3)

    def build(batch: dict[str, list], indices: list[int]) -> dict[str, list]:
        nonlocal long_sentences
        out: dict[str, list] = {"input_ids": [], "token_type_ids": [], "next_sentence_label": []}
        for document, index in zip(batch["sentences"], indices, strict=True):
            document, split = split_long_sentences(document, max_seq_len - 3)
            long_sentences += split
            documents.keep(index, document)
            # One generator per document: the result does not depend on batching or worker processes.
            rng = random.Random(f"{seed}:{index}")
            for a, b, label in document_pairs(
                document, index, documents, max_seq_len, short_seq_prob, random_next_prob, rng, contiguous
            ):
                out["input_ids"].append([cls_id, *a, sep_id, *b, sep_id])
                out["token_type_ids"].append([0] * (len(a) + 2) + [1] * (len(b) + 1))
                out["next_sentence_label"].append(label)
        return out

    examples = tokenized.map(
        build,
        batched=True,
        batch_size=_BATCH,
        with_indices=True,
        remove_columns=["sentences"],
        features=datasets.Features(
            {
                "input_ids": [datasets.Value("int32")],
                "token_type_ids": [datasets.Value("int8")],
                "next_sentence_label": datasets.Value("int8"),
            }
        ),
        cache_file_name=str(path),
        new_fingerprint=path.stem,
        desc="building sentence pairs",
    )
    if long_sentences:
        logger.warning(
            "%d sentence(s) longer than %d pairs (%d tokens) were cut into pieces of %d tokens; sentences end at "
            ". ! ? before a capital letter, so a text without them reads as one sentence",
            long_sentences,
            LONG_SENTENCE_PAIRS,
            LONG_SENTENCE_PAIRS * (max_seq_len - 3),
            max_seq_len - 3,
        )
    return examples


# --- step 2b: RoBERTa full sentences ----------------------------------------------------------------------


def _full_sentences(
    tokenized: datasets.Dataset, template: Template, separator: int, max_seq_len: int, path: Path
) -> datasets.Dataset:
    """Contiguous sentences packed up to max_seq_len (RoBERTa's FULL-SENTENCES, section 4.2), crossing document
    boundaries with ``separator`` between documents, each block wrapped by the tokenizer's single-text template
    (BERT: ``[CLS] ... [SEP]``). Sequential over the corpus, so it is written here with pyarrow (one pass,
    constant memory) rather than by a per-document map. A corpus tokenized with its knowledge units
    (``data/unit_corpus.py``) keeps them: each token travels with its join code, special tokens get ``NONE``."""
    with_units = "units" in tokenized.column_names
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        columns = [("input_ids", pa.list_(pa.int32())), ("token_type_ids", pa.list_(pa.int8()))]
        schema = pa.schema(columns + ([("units", pa.list_(pa.int8()))] if with_units else []))
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        # With units, every item is an (id, join code) pair: the packing is the same, the codes come along.
        documents = unit_documents(tokenized, _BATCH) if with_units else _iter_documents(tokenized)
        with pa.OSFile(str(temporary), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
            rows: list[list] = []
            budget = max_seq_len - template.num_special
            for block in pack_full_sentences(documents, budget, (separator, NO_UNIT) if with_units else separator):
                rows.append(wrap_with_codes(template, block) if with_units else template.assemble(block)[0])
                if len(rows) == 1000:
                    writer.write_batch(_record_batch(rows, schema))
                    rows = []
            if rows:
                writer.write_batch(_record_batch(rows, schema))
        os.replace(temporary, path)
    return datasets.Dataset.from_file(str(path))


def _iter_documents(tokenized: datasets.Dataset, column: str = "sentences"):
    for batch in tokenized.iter(batch_size=_BATCH):
        yield from batch[column]


def _record_batch(rows: list[list], schema: pa.Schema) -> pa.RecordBatch:
    """Rows of ids, or of (id, join code) pairs when the schema has a units column."""
    if "units" in schema.names:
        ids = [[i for i, _ in r] for r in rows]
        arrays = [pa.array(ids, schema.field(0).type), pa.array([[0] * len(r) for r in rows], schema.field(1).type)]
        arrays.append(pa.array([[u for _, u in r] for r in rows], schema.field(2).type))
        return pa.record_batch(arrays, schema)
    types = [[0] * len(r) for r in rows]
    return pa.record_batch([pa.array(rows, schema.field(0).type), pa.array(types, schema.field(1).type)], schema)


def pack_full_sentences(documents, max_tokens: int, sep_id: int):
    """Yield blocks of at most `max_tokens` ids: whole sentences in corpus order, `sep_id` between documents.

    A block is closed when the next sentence does not fit; a block never starts or ends with the document
    separator; a sentence longer than a block is cut into block-sized pieces.
    """
    block: list[int] = []
    for document in documents:
        separated = bool(block)
        if separated:
            block.append(sep_id)
        for sentence in document:
            for start in range(0, len(sentence), max_tokens):
                piece = sentence[start : start + max_tokens]
                if len(block) + len(piece) > max_tokens:
                    if separated:
                        block.pop()  # the next document starts a fresh block instead
                    yield block
                    block = []
                separated = False
                block.extend(piece)
    if block:
        yield block


# --- step 2c: Transformer-XL / XLNet token-stream windows ---------------------------------------------------


def _stream_windows(
    tokenized: datasets.Dataset, vocab: Vocab, length: int, stride: int, path: Path
) -> datasets.Dataset:
    """The corpus as one token stream (end-of-text, else [SEP], between documents), cut into windows of ``length``
    tokens starting every ``stride`` tokens: window k covers stream[k * stride : k * stride + length]. The
    loader's "stream" order (``data/loader.py``) deals them out so that consecutive batches hold consecutive windows
    of each of batch_size sub-streams, which is what makes a recurrent memory meaningful (Transformer-XL section
    3.2); GPT reads them shuffled."""
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        pieces = []
        for document in _iter_documents(tokenized):
            pieces.extend(document)
            pieces.append([vocab.document_separator])
        stream = np.fromiter((t for piece in pieces for t in piece), dtype=np.int32)
        count = (len(stream) - length) // stride + 1
        if count < 1:
            raise DataError(f"the corpus has {len(stream)} tokens, fewer than one window of {length}")
        starts = np.arange(count)[:, None] * stride  # (count, 1)
        windows = stream[starts + np.arange(length)[None, :]]  # (count, length)
        schema = pa.schema([("input_ids", pa.list_(pa.int32()))])
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with pa.OSFile(str(temporary), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
            for lo in range(0, count, 1000):
                values = pa.array(windows[lo : lo + 1000].reshape(-1))
                rows = pa.FixedSizeListArray.from_arrays(values, length).cast(pa.list_(pa.int32()))
                writer.write_batch(pa.record_batch([rows], schema))
        os.replace(temporary, path)
    return datasets.Dataset.from_file(str(path))
