"""Parallel text for translation: the sentence pairs of data.train_files / data.validation_files (read and checked by
``data/sources/parallel_text.py``) tokenized into a token store (``data/store/translation_pairs.py``) and grouped
into token batches.

Sentences longer than ``data.max_seq_len - 1`` tokens are cut to it when they are read and counted in a warning (one
position is left for the end-of-sentence token the collator adds).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from plm_toolkit.core.errors import ConfigError
from plm_toolkit.data.layouts.examples import PretrainingData
from plm_toolkit.data.layouts.token_batches import TokenBatches, token_batches
from plm_toolkit.data.layouts.windows import ExampleView
from plm_toolkit.data.sources.parallel_text import (
    ReadCounts,
    iter_pairs,
    report_counts,
    resolve,
)
from plm_toolkit.data.store.token_store import StoreSplit, TokenStore
from plm_toolkit.data.store.translation_pairs import prepare_parallel_store
from plm_toolkit.data.tokenization.tokenizer import vocab_from_tokenizer

if TYPE_CHECKING:
    from plm_toolkit.core.data_schema import DataConfig

log = logging.getLogger("plm_toolkit")


@dataclass
class ParallelData(PretrainingData):
    """Token batches of training and validation pairs (rows: index, source_ids, target_ids), the validation pairs'
    text as read (stripped) by row index: decoding is scored against ``references``."""

    sources: list[str] = field(default_factory=list)


class ParallelPairs(ExampleView):
    """Pair k of a split of a store of pairs: ``index`` k and both sides' ids, each cut to ``limit`` tokens."""

    column_names = ["index", "source_ids", "target_ids"]

    def __init__(self, split: StoreSplit, limit: int):
        self.split, self.limit = split, limit
        self.offsets = np.concatenate([[0], np.cumsum([s.num_documents for s in split.shards])]).astype(np.int64)
        self.skipped_empty = int(split.info.get("skipped_empty", 0))

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def row(self, index: int) -> dict:
        number = int(np.searchsorted(self.offsets, index, side="right")) - 1
        shard, pair = self.split.shards[number], index - int(self.offsets[number])
        ends = shard.array("sentence_ends")
        start, middle, end = (int(ends[2 * pair - 1]) if pair else 0), int(ends[2 * pair]), int(ends[2 * pair + 1])
        return {"index": index, "source_ids": shard.ids[start:middle][: self.limit].tolist(),
                "target_ids": shard.ids[middle:end][: self.limit].tolist()}  # fmt: skip

    def full_lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """Both sides' lengths in tokens before the cut, pair by pair (int32: 8 bytes a pair)."""
        sides: list[list[np.ndarray]] = [[], []]
        for shard in self.split.shards:
            ends = np.asarray(shard.array("sentence_ends"), np.int64)
            lengths = np.diff(np.concatenate([[0], ends])).astype(np.int32)
            sides[0].append(lengths[0::2])
            sides[1].append(lengths[1::2])
        return tuple(np.concatenate(s) if s else np.zeros(0, np.int32) for s in sides)  # type: ignore[return-value]


def batches_of(pairs: ParallelPairs, data_cfg: DataConfig, seed: int, split: str) -> TokenBatches:
    """Token batches over a split's pairs (lengths count the end or start token each side gets); the sentences cut
    to data.max_seq_len - 1 tokens are counted in a warning."""
    source, target = pairs.full_lengths()
    cut = (int(np.sum(source > pairs.limit)), int(np.sum(target > pairs.limit)))
    if any(cut):
        log.warning(
            "%s split: cut %d source and %d target sentences of %d pairs to %d tokens (data.max_seq_len=%d minus "
            "the end-of-sentence token); raise data.max_seq_len (at most model.max_position_embeddings) to keep them",
            split, *cut, len(pairs), pairs.limit, pairs.limit + 1,
        )  # fmt: skip
    source, target = np.minimum(source, pairs.limit) + 1, np.minimum(target, pairs.limit) + 1
    batches = token_batches(source, target, int(data_cfg.max_tokens), seed, int(data_cfg.max_sentences))
    return TokenBatches(pairs, batches)


def prepare_parallel_data(data_cfg: DataConfig, seed: int) -> ParallelData:
    """The sentence pairs tokenized into a token store (prepared here when missing) with a joint vocabulary (loaded,
    or trained on both sides of the training pairs), grouped into batches of about data.max_tokens tokens; the
    validation pairs' text kept for scoring."""
    if int(data_cfg.max_tokens) < int(data_cfg.max_seq_len):
        raise ConfigError(
            f"data.max_tokens={data_cfg.max_tokens} is below data.max_seq_len={data_cfg.max_seq_len}: a batch must "
            "hold at least one sentence of the longest length"
        )
    store = TokenStore(prepare_parallel_store(data_cfg))
    tokenizer = store.tokenizer
    limit = int(data_cfg.max_seq_len) - 1
    splits = {}
    for split in ("train", "validation"):
        part = store.split(split)
        if part is not None:
            specs = data_cfg.train_files if split == "train" else data_cfg.validation_files
            report_counts(", ".join(map(str, specs)), ReadCounts(part.num_documents, part.info["skipped_empty"]))
            splits[split] = batches_of(ParallelPairs(part, limit), data_cfg, seed, split)
    validation, sources, references = splits.get("validation"), [], []
    if validation is not None:  # the text, as read (stripped), that decoding is scored against
        languages = (str(data_cfg.source_lang), str(data_cfg.target_lang))
        for spec in data_cfg.validation_files:
            entry = resolve(str(spec), *languages, "data.validation_files")
            for a, b in iter_pairs(entry, *languages, ReadCounts()):
                sources.append(a)
                references.append(b)
    log.info(
        "parallel data: %d training pairs in %d batches of <= %d tokens per side; %d validation pairs",
        splits["train"].num_rows(),
        len(splits["train"]),
        int(data_cfg.max_tokens),
        len(references),
    )
    vocab = vocab_from_tokenizer(tokenizer)
    return ParallelData(tokenizer, vocab, splits["train"], validation, store, references, sources)
