"""Checks of plm-train's data group: the corpus files or the store, the token store's keys, parallel text, and the
size of a vocabulary to train."""

from __future__ import annotations

from omegaconf import DictConfig

from plm_toolkit.config.resolve import resolved_tokenizer_kind
from plm_toolkit.core.errors import PlmError
from plm_toolkit.data.sources.parallel_text import resolve
from plm_toolkit.data.sources.pieces import source_problems
from plm_toolkit.data.tokenization.vocabulary_training import MAXIMUM_VOCABULARY, MINIMUM_VOCABULARY


def tokenizer_problems(cfg: DictConfig) -> list[str]:
    """The sizes of a vocabulary to train: at least what its kind always holds, at most what 32-bit token ids count
    (the tokenizers library raised OverflowError for a negative one; vocab_size=3 trained 102 tokens without a
    word). A trained vocabulary that the corpus makes larger still is refused after training
    (data/tokenization/vocabulary_training.py)."""
    t, kind = cfg.data.tokenizer, resolved_tokenizer_kind(cfg)
    out: list[str] = []
    if t.min_frequency < 0:
        out.append(f"data.tokenizer.min_frequency={t.min_frequency}: must be 0 or positive")
    out += extension_problems(t.get("extend"))
    if t.path or kind not in MINIMUM_VOCABULARY:
        return out
    least, what = MINIMUM_VOCABULARY[kind]
    if not least <= t.vocab_size <= MAXIMUM_VOCABULARY:
        out.append(
            f"data.tokenizer.vocab_size={t.vocab_size}: expected a size from {least} (a {kind} vocabulary holds "
            f"{what}) to {MAXIMUM_VOCABULARY} (2^31 - 1: token ids are 32-bit)"
        )
    return out


def extension_problems(extend) -> list[str]:
    """data.tokenizer.extend's numbers (checked before the extension, which runs before validation)."""
    if extend is not None and extend.top_words < 0:
        return [f"data.tokenizer.extend.top_words={extend.top_words}: must be 0 (none) or a number of words to add"]
    return []


def file_problems(d) -> list[str]:
    return source_problems(d)


def store_problems(d) -> list[str]:
    """The token store's keys (docs/data-store.md)."""
    out = []
    if d.get("num_proc") is not None and d.num_proc < 1:
        out.append(f"data.num_proc={d.num_proc}: must be at least 1 (or null for the available cores)")
    parts = d.get("prepare_parts", 1)
    if parts < 1:
        out.append(f"data.prepare_parts={parts}: expected 1 (one job) or the number of jobs that share the store")
    elif not 0 <= d.get("prepare_part", 0) < parts:
        out.append(f"data.prepare_part={d.prepare_part}: expected 0 to data.prepare_parts - 1 ({parts} parts)")
    if d.get("shard_bytes") is not None and d.shard_bytes < 1 << 12:
        out.append(f"data.shard_bytes={d.shard_bytes}: must be at least 4096")
    if d.tokenizer.get("train_sample_bytes", 1) < 1:
        out.append(f"data.tokenizer.train_sample_bytes={d.tokenizer.train_sample_bytes}: must be at least 1")
    return out


def parallel_problems(d) -> list[str]:
    """data=parallel: every entry names a prefix of two language files or a JSONL file; batches hold a sentence."""
    out: list[str] = []
    for key in ("train_files", "validation_files"):
        for spec in d[key]:
            try:
                resolve(spec, d.source_lang, d.target_lang, f"data.{key}")
            except PlmError as err:
                out.append(str(err))
    if d.source_lang == d.target_lang:
        out.append(f"data.source_lang and data.target_lang are both {d.source_lang!r}; give two languages")
    if d.max_tokens < d.max_seq_len:
        out.append(
            f"data.max_tokens={d.max_tokens} is below data.max_seq_len={d.max_seq_len}: a batch must hold at "
            "least one sentence of the longest length"
        )
    if d.max_sentences < 0:
        out.append(f"data.max_sentences={d.max_sentences}: must be 0 (no limit) or positive")
    return out
