"""Whole-word masking over a word segmenter's words (Chinese BERT-wwm, Cui et al. 2019, https://arxiv.org/abs/1906.08101):
the words travel beside the ids as ERNIE's knowledge units do, one join code per token (``data/units/knowledge.py``), in a
store of units (``data/units/store.py``) with no phrase and no entity.

``objective.masking=whole_word objective.word_segmenter=jieba`` on mlm, mlm_nsp or mlm_sop: the corpus is segmented
by jieba at preparation time; a token that continues a word gets the code ``WORD``, and masking groups a row's
tokens into words by it (``objectives/masking.py``). BERT's WordPiece makes every Chinese character a token, so a
Chinese word of n characters is n tokens masked together, each with its own label, as HFL's BERT-wwm. Where the
segmenter's words and the tokenizer's pieces disagree (a piece crossing a word boundary), the tokens of those words
are masked one by one (``SentenceUnits.token_codes``).

The sentence-pair layouts (NSP, SOP) carry the codes through the pairs: a token travels with its code packed into
one int (``coded``), which the pair builder moves, cuts and truncates as it does an id, and ``uncoded`` splits again.
"""

from __future__ import annotations

from dataclasses import dataclass

from plm_toolkit.data.units.knowledge import NONE

_CODE_BITS = 2  # join codes are 0..3 (data/units/knowledge.py)


@dataclass(frozen=True)
class WordSources:
    """Where whole-word masking finds its words: the keys of a knowledge-units source (what ``data/units/store.py``
    and ``data/units/corpus.py`` read) with words only, so that the store matches ERNIE's for the same segmenter."""

    word_segmenter: str
    presegmented: bool = False
    phrase_lexicon: str | None = None
    phrase_lexicon_case: str = "ignore"
    entity_gazetteer: str | None = None
    entity_gazetteer_case: str = "exact"
    entity_tagger: str | None = None
    collocation_min_count: int = 5
    collocation_threshold: float = 100.0
    collocation_passes: int = 0  # no phrases
    # Whole words, not ERNIE's stages: the store's log says nothing about a missing entity source.
    masking: str = "whole_word"


def coded_document(split, index: int) -> list[list[int]]:
    """Document ``index`` of a store split of units, each token as ``id << 2 | join code``."""
    ids, codes = split.document(index), split.document(index, "units")
    return [[(i << _CODE_BITS) | c for i, c in zip(s, k, strict=True)] for s, k in zip(ids, codes, strict=True)]


def uncoded(tokens: list[int]) -> tuple[list[int], list[int]]:
    """(ids, join codes) of tokens that ``coded_document`` packed."""
    mask = (1 << _CODE_BITS) - 1
    return [t >> _CODE_BITS for t in tokens], [t & mask for t in tokens]


def pair_codes(codes_a: list[int], codes_b: list[int]) -> list[int]:
    """The codes of ``[CLS] A [SEP] B [SEP]``: the special tokens start no unit."""
    return [NONE, *codes_a, NONE, *codes_b, NONE]
