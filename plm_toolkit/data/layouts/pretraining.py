"""Pretraining examples from the token store (``data/store/token_store.py``): BERT sentence pairs, ALBERT segment pairs,
RoBERTa full-sentence blocks, windows of one long token stream (GPT, Transformer-XL, XLNet, T5) and ELMo's sentence
streams, each computed on the fly from the memory-mapped store (``data/layouts/windows.py``,
``data/layouts/packed.py``). Each builder cuts one split (a ``Cut``); ``data/layouts/registry.py`` names the builder of
each layout.

The store is prepared once (``data/store/preparation.py``, or ``plm-prepare``); what a packed layout needs beyond it
(block boundaries, sentence pairs) is written once beside it, keyed on every setting that changes it. Masking is not
done here: objectives mask each batch afresh (RoBERTa's dynamic masking, section 4.1).

ERNIE's knowledge units are full-sentence blocks of a store that holds a join code per token (``data/units/store.py``).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokenizers import Tokenizer

from plm_toolkit.core.cache import cache_root, stable_hash
from plm_toolkit.data.layouts.blend import ConcatenatedExamples
from plm_toolkit.data.layouts.packed import PACKED_VERSION, FullSentenceBlocks, SegmentPairExamples
from plm_toolkit.data.layouts.plan import DataPlan
from plm_toolkit.data.layouts.windows import SentenceStreamWindows, StreamWindows
from plm_toolkit.data.store.foreign import open_foreign_store
from plm_toolkit.data.store.preparation import prepare_store
from plm_toolkit.data.store.processes import available_cores
from plm_toolkit.data.store.token_store import StoreSplit, TokenStore
from plm_toolkit.data.tokenization.template import template_of
from plm_toolkit.data.tokenization.vocab import Vocab

if TYPE_CHECKING:
    from plm_toolkit.core.data_schema import DataConfig

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Cut:
    """What a layout cuts one split's examples from: the store's split (``part``) and the run's settings."""

    data_cfg: Any
    store: TokenStore
    part: StoreSplit
    split: str
    seed: int
    plan: DataPlan
    tokenizer: Tokenizer
    vocab: Vocab

    @property
    def max_seq_len(self) -> int:
        return int(self.data_cfg.max_seq_len)

    @property
    def window(self) -> tuple[int, int]:
        """(length, stride) of a stream layout's windows; by default the inputs and next-token targets of consecutive
        segments (max_seq_len + 1 tokens every max_seq_len)."""
        return self.plan.window or self.max_seq_len + 1, self.plan.stride or self.max_seq_len


def open_store(data_cfg: DataConfig, plan: DataPlan, unit: str) -> TokenStore:
    """The token store of ``data_cfg`` holding ``unit``: a Megatron-LM or nanoGPT token file that data.store names
    (read with data.tokenizer.path), else this toolkit's own, prepared here (or found) with its own tokenizer."""
    foreign = open_foreign_store(data_cfg, plan.layout, plan.units, plan.spellings)
    return foreign or TokenStore(prepare_store(data_cfg, unit, plan.spellings, plan.units))


def stream_windows(cut: Cut) -> StreamWindows:
    """GPT's, Transformer-XL's, XLNet's and T5's: windows of the corpus as one token stream."""
    return StreamWindows(cut.part, cut.vocab.document_separator, *cut.window)


def sentence_stream_windows(cut: Cut) -> SentenceStreamWindows:
    """ELMo's: windows of the stream of <S> sentence </S> and of its mirror, with the spellings of unknown words when
    the plan asks for them."""
    bos = cut.vocab.require("bos_id", "ELMo's sentence streams")
    eos = cut.vocab.require("eos_id", "ELMo's sentence streams")
    unk_id = cut.vocab.require("unk_id", "keeping the spelling of unknown words") if cut.plan.spellings else None
    return SentenceStreamWindows(cut.part, bos, eos, *cut.window, unk_id)


def full_sentence_blocks(cut: Cut) -> FullSentenceBlocks:
    """RoBERTa's FULL-SENTENCES, each block wrapped by the tokenizer's single-text template."""
    template, separator = template_of(cut.tokenizer, pair=False), cut.vocab.document_separator
    return FullSentenceBlocks(cut.part, template, separator, cut.max_seq_len, layout_folder(cut.store, cut.data_cfg))


def sentence_pairs(cut: Cut):
    """BERT's sentence pairs: B the next sentence, or a random one half the time (NSP)."""
    return _pairs(cut, contiguous=False)


def segment_pairs(cut: Cut):
    """ALBERT's segment pairs: two consecutive segments of one document, in order (SOP swaps them per batch)."""
    return _pairs(cut, contiguous=True)


def _pairs(cut: Cut, contiguous: bool):
    """[CLS] A [SEP] B [SEP] whatever the tokenizer's own pair template: the input format of the segment objectives
    (NSP, SOP), whose sentence-order swap relies on it. data.pair_draws > 1 draws the training pairs that many
    times, one after the other."""
    cls_id = cut.vocab.require("cls_id", "a sentence-pair layout ([CLS] A [SEP] B [SEP])")
    sep_id = cut.vocab.require("sep_id", "a sentence-pair layout ([CLS] A [SEP] B [SEP])")
    data_cfg, part = cut.data_cfg, cut.part
    if not contiguous and part.num_documents < 2:
        sources = ", ".join(s["path"] for s in part.info["sources"])
        logger.warning(
            "%s holds one document: random next sentences come from elsewhere in that document; separate "
            "documents with a blank line for proper NSP negatives",
            sources,
        )
    settings = {
        "max_seq_len": cut.max_seq_len,
        "short_seq_prob": float(data_cfg.short_seq_prob),
        "random_next_prob": float(data_cfg.random_next_prob),
        "contiguous": contiguous,
    }
    processes = getattr(data_cfg, "num_proc", None) or available_cores()
    draws = int(getattr(data_cfg, "pair_draws", 1)) if cut.split == "train" else 1
    folder = layout_folder(cut.store, data_cfg)
    views = []
    for k in range(draws):
        draw_seed = cut.seed if k == 0 else f"{cut.seed}/{k}"  # the first draw is the pairs a run of one draw trains on
        name = f"pairs-{cut.split}-{stable_hash(settings, draw_seed, PACKED_VERSION)}"
        views.append(SegmentPairExamples(part, cls_id, sep_id, settings, draw_seed, folder / name, processes))
    return views[0] if draws == 1 else ConcatenatedExamples([f"draw{k}" for k in range(draws)], views)


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
