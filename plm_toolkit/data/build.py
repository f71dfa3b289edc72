"""The train and validation examples of a pretraining run: a tokenizer and the examples in the objective's layout."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import datasets
from tokenizers import Tokenizer

from plm_toolkit.core.errors import DataError
from plm_toolkit.data.layouts.plan import LAYOUT_BUILDERS, DataPlan
from plm_toolkit.data.layouts.pretraining import build_pretraining_examples, store_unit
from plm_toolkit.data.sources.corpus import split_files
from plm_toolkit.data.store.foreign import open_foreign_store
from plm_toolkit.data.store.preparation import prepare_store
from plm_toolkit.data.store.token_store import TokenStore
from plm_toolkit.data.tokenization.tokenizer import load_or_train_tokenizer, vocab_from_tokenizer
from plm_toolkit.data.tokenization.vocab import Vocab


@dataclass
class PretrainingData:
    tokenizer: Tokenizer
    vocab: Vocab
    # Examples with input_ids and token_type_ids (+ next_sentence_label for sentence pairs).
    train: datasets.Dataset
    # None when there are no validation files (no evaluation).
    validation: datasets.Dataset | None


def prepare_pretraining_data(
    data_cfg: Any, layout: Any, seed: int, window: tuple[int, int] | None = None, units: Any = None
) -> PretrainingData:
    """Tokenizer (loaded or trained), then the train and validation examples in `layout` (a layout name, or an
    objective's ``DataPlan``, which also gives the window, the knowledge units' sources and whether the examples
    carry the spelling of unknown tokens); from the token store (``data/store/token_store.py``).
    ``window`` = (length, stride) of the "streams" layout; ``units``: where knowledge units come from, when the
    objective masks them (``data/units/corpus.py``)."""
    plan = layout if isinstance(layout, DataPlan) else DataPlan(str(getattr(layout, "value", layout)))
    if isinstance(layout, DataPlan):
        layout, window, units = layout.layout, layout.stream_window, layout.units
    builder = LAYOUT_BUILDERS.get(plan.layout)
    foreign = open_foreign_store(data_cfg, plan.layout, units, plan.spellings) if builder is None else None
    if foreign is not None:  # a Megatron-LM or nanoGPT token file, read with data.tokenizer.path
        tokenizer = foreign.tokenizer
    elif builder is None:  # the store's own tokenizer (a given data.store may hold any)
        folder = prepare_store(data_cfg, store_unit(plan.layout, units), plan.spellings, units)
        tokenizer = TokenStore(folder).tokenizer
    else:
        tokenizer = load_or_train_tokenizer(data_cfg)
    vocab = vocab_from_tokenizer(tokenizer)

    def examples(split: str):
        if builder is not None:  # a layout an objective module registered (data/layouts/plan.py)
            return builder(data_cfg, tokenizer, vocab, plan, split, seed)
        return build_pretraining_examples(
            data_cfg, tokenizer, vocab, layout, split, seed, window, units, plan.spellings
        )

    splits = []
    for split in ("train", "validation"):
        with naming_split(data_cfg, split):
            splits.append(examples(split))
    assert splits[0] is not None  # the training split always has a source, or reading it raised
    return PretrainingData(tokenizer, vocab, *splits)


@contextmanager
def naming_split(data_cfg: Any, split: str):
    """A DataError about one split's examples that names none of its files ("the corpus has 5 tokens, fewer than one
    window of 33") gets the split's key and files in front: which of the files was too short."""
    try:
        yield
    except DataError as err:
        sources = [str(data_cfg.dataset_path)] if data_cfg.dataset_path else split_files(data_cfg, split)
        if not sources or any(source in str(err) for source in sources):
            raise
        where = f"data.{split}_files=[{', '.join(sources)}]"
        if data_cfg.dataset_path:
            where = f"data.dataset_path={data_cfg.dataset_path} ({split} split)"
        raise DataError(f"{where}: {err}") from err
