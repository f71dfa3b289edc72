"""Pretraining examples from the token store (``data/store/token_store.py``): BERT sentence pairs, ALBERT segment pairs,
RoBERTa full-sentence blocks, windows of one long token stream (GPT, Transformer-XL, XLNet, T5) and ELMo's sentence
streams, each computed on the fly from the memory-mapped store (``data/layouts/windows.py``,
``data/layouts/packed.py``).

The store is prepared once (``data/store/preparation.py``, or ``plm-prepare``); what a packed layout needs beyond it
(block boundaries, sentence pairs) is written once beside it, keyed on every setting that changes it. Masking is not
done here: objectives mask each batch afresh (RoBERTa's dynamic masking, section 4.1).

ERNIE's knowledge units are full-sentence blocks of a store that holds a join code per token (``data/units/store.py``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokenizers import Tokenizer

from plm_toolkit.core.cache import cache_root, stable_hash
from plm_toolkit.core.choices import choice
from plm_toolkit.core.errors import DataError
from plm_toolkit.data.layouts.blend import ConcatenatedExamples
from plm_toolkit.data.layouts.packed import PACKED_VERSION, FullSentenceBlocks, SentencePairs
from plm_toolkit.data.layouts.plan import LAYOUTS, STREAM_LAYOUTS, Layout
from plm_toolkit.data.layouts.windows import SentenceStreamWindows, StreamWindows
from plm_toolkit.data.store.foreign import open_foreign_store
from plm_toolkit.data.store.preparation import prepare_store
from plm_toolkit.data.store.processes import available_cores
from plm_toolkit.data.store.token_store import TokenStore
from plm_toolkit.data.tokenization.template import template_of
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.data.units.store import log_units

if TYPE_CHECKING:
    from plm_toolkit.core.data_schema import DataConfig

PAIR_LAYOUTS = (Layout.sentence_pairs, Layout.segment_pairs)

logger = logging.getLogger(__name__)


def build_pretraining_examples(
    data_cfg: DataConfig,
    tokenizer: Tokenizer,
    vocab: Vocab,
    layout: Any,
    split: str,
    seed: int,
    window: tuple[int, int] | None = None,
    units: Any = None,
    spellings: bool = False,
    store: TokenStore | None = None,
):
    """The examples of `split` in `layout` (a view over the store, ``data/layouts/windows.py``), or None when the split
    has no source. Deterministic given `seed`.

    ``window`` = (length, stride) of the stream layouts; default (max_seq_len + 1, max_seq_len): inputs and
    next-token targets of consecutive segments. ``units``: where knowledge units come from (an objective config,
    ``data/units/corpus.py``); the full-sentences examples then carry a ``units`` column, a join code per token.
    ``spellings``: the sentence-streams examples also carry the spelling of every unk token
    (``data/tokenization/spellings.py``). ``store``: the token store, when the caller has opened it.
    """
    layout = choice(layout)
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    max_seq_len = int(data_cfg.max_seq_len)
    if max_seq_len < 8:
        raise DataError(f"data.max_seq_len={max_seq_len} is too short; expected at least 8 tokens")
    if units is not None and layout not in (Layout.full_sentences, *PAIR_LAYOUTS):
        raise DataError(f"knowledge units travel with full_sentences or sentence-pair packing only, not {layout}")
    if spellings and layout != Layout.sentence_streams:
        raise ValueError(f"token spellings travel with sentence_streams packing only, not {layout}")
    if store is None:  # prepared (or found) here; the run's data entry point passes the one it opened
        store = open_foreign_store(data_cfg, layout, units, spellings) or TokenStore(
            prepare_store(data_cfg, store_unit(layout, units), spellings, units)
        )
    if store.tokenizer.to_str() != tokenizer.to_str():
        raise DataError(f"the token store {store.folder} holds another tokenizer than the one given")
    part = store.split(split)
    if part is None:
        return None
    if units is not None:
        log_units(split, part.info, units)
    if layout in STREAM_LAYOUTS:
        length, stride = window or (max_seq_len + 1, max_seq_len)
        if layout == Layout.streams:
            return StreamWindows(part, vocab.document_separator, length, stride)
        bos = vocab.require("bos_id", "ELMo's sentence streams")
        eos = vocab.require("eos_id", "ELMo's sentence streams")
        unk_id = vocab.require("unk_id", "keeping the spelling of unknown words") if spellings else None
        return SentenceStreamWindows(part, bos, eos, length, stride, unk_id)
    folder = layout_folder(store, data_cfg)
    if layout == Layout.full_sentences:
        return FullSentenceBlocks(
            part, template_of(tokenizer, pair=False), vocab.document_separator, max_seq_len, folder
        )
    # [CLS] A [SEP] B [SEP] whatever the tokenizer's own pair template: the input format of the segment objectives
    # (NSP, SOP), whose sentence-order swap relies on it.
    cls_id = vocab.require("cls_id", "a sentence-pair layout ([CLS] A [SEP] B [SEP])")
    sep_id = vocab.require("sep_id", "a sentence-pair layout ([CLS] A [SEP] B [SEP])")
    if layout == Layout.sentence_pairs and part.num_documents < 2:
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
        "contiguous": layout == Layout.segment_pairs,
    }
    processes = getattr(data_cfg, "num_proc", None) or available_cores()
    draws = int(getattr(data_cfg, "pair_draws", 1)) if split == "train" else 1
    views = []
    for k in range(draws):
        draw_seed = seed if k == 0 else f"{seed}/{k}"  # the first draw is the pairs a run of one draw trains on
        name = f"pairs-{split}-{stable_hash(settings, draw_seed, PACKED_VERSION)}"
        views.append(SentencePairs(part, cls_id, sep_id, settings, draw_seed, folder / name, processes))
    return views[0] if draws == 1 else ConcatenatedExamples([f"draw{k}" for k in range(draws)], views)


def store_unit(layout: str, units: Any = None) -> str:
    """What a layout needs the store to hold (``data/store/shard_worker.py``): running text for streams, running text
    with sentence starts for full sentences, sentences one by one for the sentence layouts, and sentences one by
    one with their join codes for full sentences of knowledge units (``units``: their sources)."""
    if units is not None:
        return "units"
    return {Layout.streams: "documents", Layout.full_sentences: "document_sentences"}.get(layout, "sentences")


def layout_folder(store: TokenStore, data_cfg: DataConfig) -> Path:
    """Where the files a packed layout writes once go: beside the store, or, where the store's folder is read-only,
    under cache_dir."""
    if os.access(store.folder, os.W_OK):
        return store.folder / "layouts"
    return cache_root(data_cfg) / "layouts" / store.fingerprint


def pack_full_sentences(documents, max_tokens: int, sep_id: int):
    """RoBERTa's packing over lists of sentences, the reference ``packed.pack_blocks`` computes from a shard's
    index (the tests compare them). Yield blocks of at most `max_tokens` ids: whole sentences in corpus order,
    `sep_id` between documents.

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
