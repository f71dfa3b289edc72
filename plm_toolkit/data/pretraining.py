"""Pretraining examples from the token store (``data/store.py``): BERT sentence pairs, ALBERT segment pairs,
RoBERTa full-sentence blocks, windows of one long token stream (GPT, Transformer-XL, XLNet, T5) and ELMo's sentence
streams, each computed on the fly from the memory-mapped store (``data/layouts.py``, ``data/packed.py``).

The store is prepared once (``data/preparation.py``, or ``plm-prepare``); what a packed layout needs beyond it (block
boundaries, sentence pairs) is written once beside it, keyed on every setting that changes it. Masking is not done
here: objectives mask each batch afresh (RoBERTa's dynamic masking, section 4.1).

ERNIE's knowledge units are still tokenized into an Arrow cache by ``data/unit_corpus.py`` and packed here.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import datasets
import pyarrow as pa
from tokenizers import Tokenizer

from plm_toolkit.data.corpus import cache_root, choice, read_documents, stable_hash
from plm_toolkit.data.layouts import SentenceStreamWindows, StreamWindows
from plm_toolkit.data.packed import PACKED_VERSION, FullSentenceBlocks, SentencePairs
from plm_toolkit.data.plan import LAYOUTS, STREAM_LAYOUTS
from plm_toolkit.data.preparation import prepare_store
from plm_toolkit.data.store import TokenStore
from plm_toolkit.data.template import Template, template_of
from plm_toolkit.data.unit_corpus import tokenize_with_units, unit_documents, wrap_with_codes
from plm_toolkit.data.units import NONE as NO_UNIT
from plm_toolkit.data.vocab import Vocab
from plm_toolkit.data.workers import available_cores
from plm_toolkit.errors import DataError

PAIR_LAYOUTS = ("sentence_pairs", "segment_pairs")
# Bump when a change to this file changes what the cached files hold.
FORMAT_VERSION = 4
_BATCH = 256  # documents per batch

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
):
    """The examples of `split` in `layout` (a view over the store, ``data/layouts.py``), or None when the split has
    no source. Deterministic given `seed`.

    ``window`` = (length, stride) of the stream layouts; default (max_seq_len + 1, max_seq_len): inputs and
    next-token targets of consecutive segments. ``units``: where knowledge units come from (an objective config,
    ``data/unit_corpus.py``); the full-sentences examples then carry a ``units`` column, a join code per token.
    ``spellings``: the sentence-streams examples also carry the spelling of every unk token (``data/spellings.py``).
    """
    layout = choice(layout)
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    max_seq_len = int(data_cfg.max_seq_len)
    if max_seq_len < 8:
        raise DataError(f"data.max_seq_len={max_seq_len} is too short; expected at least 8 tokens")
    if units is not None and layout != "full_sentences":
        raise DataError(f"knowledge units travel with full_sentences packing only, not {layout}")
    if spellings and layout != "sentence_streams":
        raise ValueError(f"token spellings travel with sentence_streams packing only, not {layout}")
    if units is not None:
        return _unit_blocks(data_cfg, tokenizer, vocab, split, units)
    store = TokenStore(prepare_store(data_cfg, store_unit(layout), spellings))
    if store.tokenizer.to_str() != tokenizer.to_str():
        raise DataError(f"the token store {store.folder} holds another tokenizer than the one given")
    part = store.split(split)
    if part is None:
        return None
    if layout in STREAM_LAYOUTS:
        length, stride = window or (max_seq_len + 1, max_seq_len)
        if layout == "streams":
            return StreamWindows(part, vocab.document_separator, length, stride)
        bos = vocab.require("bos_id", "ELMo's sentence streams")
        eos = vocab.require("eos_id", "ELMo's sentence streams")
        unk_id = vocab.require("unk_id", "keeping the spelling of unknown words") if spellings else None
        return SentenceStreamWindows(part, bos, eos, length, stride, unk_id)
    folder = layout_folder(store, data_cfg)
    if layout == "full_sentences":
        return FullSentenceBlocks(
            part, template_of(tokenizer, pair=False), vocab.document_separator, max_seq_len, folder
        )
    # [CLS] A [SEP] B [SEP] whatever the tokenizer's own pair template: the input format of the segment objectives
    # (NSP, SOP), whose sentence-order swap relies on it.
    cls_id = vocab.require("cls_id", "a sentence-pair layout ([CLS] A [SEP] B [SEP])")
    sep_id = vocab.require("sep_id", "a sentence-pair layout ([CLS] A [SEP] B [SEP])")
    if layout == "sentence_pairs" and part.num_documents < 2:
        sources = ", ".join(s["path"] for s in part.info["sources"])
        logger.warning(
            "%s holds one document: random next sentences come from elsewhere in that document; separate "
            "documents with a blank line for proper NSP negatives",
            sources,
        )
    settings = {
        "max_seq_len": max_seq_len,
        "short_seq_prob": float(data_cfg.short_seq_prob),
        "random_next_prob": float(data_cfg.random_next_prob),
        "contiguous": layout == "segment_pairs",
    }
    name = f"pairs-{split}-{stable_hash(settings, seed, PACKED_VERSION)}"
    processes = getattr(data_cfg, "num_proc", None) or available_cores()
    return SentencePairs(part, cls_id, sep_id, settings, seed, folder / name, processes)


def store_unit(layout: str) -> str:
    """What a layout needs the store to hold (``data/shard_worker.py``): running text for streams, running text
    with sentence starts for full sentences, sentences one by one for the sentence layouts."""
    return {"streams": "documents", "full_sentences": "document_sentences"}.get(layout, "sentences")


def layout_folder(store: TokenStore, data_cfg: Any) -> Path:
    """Where the files a packed layout writes once go: beside the store, or, where the store's folder is read-only,
    under cache_dir."""
    if os.access(store.folder, os.W_OK):
        return store.folder / "layouts"
    return cache_root(data_cfg) / "layouts" / store.fingerprint


def _unit_blocks(data_cfg: Any, tokenizer: Tokenizer, vocab: Vocab, split: str, units: Any) -> datasets.Dataset | None:
    """ERNIE's full-sentence blocks with a join code per token, from the unit corpus's Arrow cache."""
    documents = read_documents(data_cfg, split)
    if documents is None:
        return None
    tokenized = tokenize_with_units(documents, tokenizer, data_cfg, units)
    settings = ("full_sentences", int(data_cfg.max_seq_len), FORMAT_VERSION)
    path = cache_root(data_cfg) / "examples" / f"{stable_hash(tokenized._fingerprint, settings)}.arrow"
    single = template_of(tokenizer, pair=False)
    return _full_sentences(tokenized, single, vocab.document_separator, int(data_cfg.max_seq_len), path)


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
