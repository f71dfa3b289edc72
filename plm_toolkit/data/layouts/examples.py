"""One length's examples of a pretraining run: the tokenizer and both splits in the objective's layout (built by
``data/build.py``; a blend's are its sources' blended, ``data/layouts/blend_sources.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import datasets
from tokenizers import Tokenizer

from plm_toolkit.data.store.token_store import TokenStore
from plm_toolkit.data.tokenization.vocab import Vocab


@dataclass
class PretrainingData:
    tokenizer: Tokenizer
    vocab: Vocab
    # Examples with input_ids and token_type_ids (+ next_sentence_label for sentence pairs).
    train: datasets.Dataset
    # None when there are no validation files (no evaluation).
    validation: datasets.Dataset | None
    # The token store the examples are read from (None for a layout that prepares its data without one).
    store: TokenStore | None = None
    # Translation: the validation targets as read, which decoding is scored against, by row index.
    references: list[str] = field(default_factory=list)
