"""Whole-word masking over a segmenter's words for mlm, mlm_nsp and mlm_sop (HFL's Chinese BERT-wwm and
RoBERTa-wwm-ext, Cui et al. 2019, https://arxiv.org/abs/1906.08101, section 3.1): ``objective.masking=whole_word
objective.word_segmenter=jieba``, the keys ERNIE's ``knowledge_masking`` has.

HFL segment their corpus with LTP and, for every Chinese word, mask all of its characters when the word is chosen
(15% of the characters overall, each target with its own label; 80% [MASK], 10% random, 10% kept). Here jieba
segments at preparation time, the words travel beside the ids as join codes (``data/units/words.py``) and
``MaskingTransform`` draws whole words until 15% of the row's tokens are targets.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from plm_toolkit.core.choices import choice
from plm_toolkit.core.errors import ConfigError
from plm_toolkit.data.layouts.plan import DataPlan
from plm_toolkit.data.units.words import WordSources

# The masking units that group tokens into words, and so can read a segmenter's.
WORD_MASKING = ("whole_word", "ngram")


def word_segmenter(config: Any) -> str | None:
    """``objective.word_segmenter`` as a plain string, or None."""
    value = getattr(config, "word_segmenter", None)
    return None if value is None else choice(value)


def check_word_segmenter(config: Any) -> None:
    """ConfigError when ``word_segmenter`` is set with a masking that masks no words, or when jieba is missing."""
    segmenter = word_segmenter(config)
    if segmenter is None:
        return
    masking = choice(getattr(config, "masking", "token"))
    if masking not in WORD_MASKING:
        raise ConfigError(
            f"objective.word_segmenter={segmenter} finds the words that whole-word masking masks, but "
            f"objective.masking={masking}; set objective.masking=whole_word (or ngram), or leave "
            "objective.word_segmenter unset"
        )
    if segmenter == "jieba":
        from plm_toolkit.data.units.knowledge import jieba_module

        jieba_module()


def with_word_units(plan: DataPlan, config: Any) -> DataPlan:
    """``plan`` with the segmenter's words as its units (the store holds a join code per token), when set."""
    segmenter = word_segmenter(config)
    if segmenter is None or choice(getattr(config, "masking", "token")) not in WORD_MASKING:
        return plan
    return dataclasses.replace(plan, units=WordSources(segmenter))
