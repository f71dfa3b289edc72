"""Checks of plm-train's data group (``data_problems``): its numbers, the corpus files or the store, the token
store's keys, parallel text, and the size of a vocabulary to train."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from plm_toolkit.config.resolve import resolved_tokenizer_kind
from plm_toolkit.core.errors import PlmError
from plm_toolkit.data.sources.parallel_text import resolve
from plm_toolkit.data.sources.pieces import source_problems
from plm_toolkit.data.sources.user_files import not_a_file
from plm_toolkit.data.store.given import KEYS, given_entries
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


def data_problems(cfg: DictConfig) -> list[str]:
    """The data group: its numbers, the token store's keys, the vocabulary to train, the files or the store."""
    m, d = cfg.model, cfg.data
    out: list[str] = []
    if d.num_workers < 0:
        out.append(f"data.num_workers={d.num_workers}: must be 0 (load in the training process) or positive")
    out += store_problems(d)
    out += tokenizer_problems(cfg)
    if m.get("vocab_size") is not None and d.tokenizer.path is None and m.vocab_size < d.tokenizer.vocab_size:
        out.append(
            f"model.vocab_size={m.vocab_size} is smaller than data.tokenizer.vocab_size={d.tokenizer.vocab_size}; "
            "leave model.vocab_size=null to take the tokenizer's size"
        )
    for key in ("short_seq_prob", "random_next_prob"):
        if not 0.0 <= d[key] <= 1.0:
            out.append(f"data.{key}={d[key]}: expected a probability in [0, 1]")
    if d.get("pair_draws", 1) < 1:
        out.append(f"data.pair_draws={d.pair_draws}: expected how many times to draw the sentence pairs, 1 or more")
    parallel = "source_lang" in d
    if parallel and not d.train_files:
        out.append(
            "data.train_files is empty: give data.train_files=[corpus/train] (reads corpus/train.<lang> for "
            "data.source_lang and data.target_lang) or a .jsonl file with one key per language"
        )
    elif not d.train_files and not d.dataset_path and not d.get("store") and not d.get("sources"):
        out.append("data.train_files is empty and data.dataset_path is not set: give one (or use data=default)")
    out += parallel_problems(d) if parallel else file_problems(d)
    if d.dataset_path and not Path(d.dataset_path).expanduser().is_dir():
        out.append(f"data.dataset_path={d.dataset_path} is not a directory written by datasets' save_to_disk")
    given = [f"data.{KEYS[split]}" for split in KEYS if not parallel and given_entries(d, split)]
    if d.dataset_path and given:  # the saved dataset replaces the files: they would be ignored
        out.append(f"data.dataset_path and {' and '.join(given)} are both given; the saved dataset replaces the "
                   "files, which would be ignored: give one")  # fmt: skip
    if d.tokenizer.path and not_a_file(d.tokenizer.path):
        out.append(
            f"data.tokenizer.path={d.tokenizer.path} is not a file ({not_a_file(d.tokenizer.path)}); expected a "
            "tokenizer.json, vocab.txt or vocab.json"
        )
    return out
