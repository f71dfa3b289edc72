"""Tokenizers: load a tokenizer.json, a WordPiece vocab.txt or a byte-level BPE vocab.json + merges.txt, or train a
WordPiece (BERT), byte-level BPE (RoBERTa's or GPT-2's special tokens), SentencePiece-style unigram (XLNet),
character or word (ELMo's, ``data/tokenization/word_vocabulary.py``) vocabulary on the corpus (the training itself,
and the kind and sizes it allows, are ``data/tokenization/vocabulary_training.py``'s).

Each tokenizer carries its family's template (its post-processor): how one text or a pair is wrapped in special
tokens. The roles of the special tokens (pad, unk, cls, sep, mask, bos, eos, sentinels) are read from it by
``vocab_from_tokenizer``; none is required here, the code that needs one asks for it (``Vocab.require``).

A trained tokenizer is cached as `<cache_dir>/tokenizers/<key>.json`. The key hashes the training split's
contents (the sha256 of each file's bytes, or a saved dataset's fingerprint) together with the tokenizer
settings and the `tokenizers` version, so that editing a file or a setting trains a new one and anything else
reuses the cached file.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tokenizers
from tokenizers import Tokenizer, models, pre_tokenizers

from plm_toolkit.core.atomic import atomic_file
from plm_toolkit.core.cache import cache_root, stable_hash
from plm_toolkit.core.errors import DataError
from plm_toolkit.data.sources.corpus import document_boundary
from plm_toolkit.data.sources.pieces import resolve_sources
from plm_toolkit.data.sources.sampling import sample_texts
from plm_toolkit.data.sources.user_files import not_a_file, read_text
from plm_toolkit.data.tokenization.pipelines import (
    BPE_SPECIAL_TOKENS,
    GPT2_SPECIAL_TOKENS,
    SPECIAL_TOKENS,
    bert_tokenizer,
    bpe_files_tokenizer,
    with_gpt2_template,
)
from plm_toolkit.data.tokenization.sentinels import (
    T5_SPECIAL_TOKENS,
    sentinel_ids,
)
from plm_toolkit.data.tokenization.vocab import ROLE_TOKENS, Vocab
from plm_toolkit.data.tokenization.vocabulary_files import check_ids, read_bpe_files, read_vocab_txt, vocabulary_size
from plm_toolkit.data.tokenization.vocabulary_training import lowercase_setting, tokenizer_kind, train_on_texts
from plm_toolkit.data.tokenization.word_vocabulary import WORD_SPECIAL_TOKENS

if TYPE_CHECKING:
    from plm_toolkit.core.data_schema import DataConfig

# The marker byte-level BPE puts at the start of a piece that follows a space (a byte-level "Ġ").
_BYTE_LEVEL_SPACE = "\u0120"
# The characters byte-level BPE writes for the bytes that are not printable Latin-1 (controls, the space as "Ġ", the
# newline as "Ċ", DEL, 0x80-0xA0, the soft hyphen): in a text a user writes, only as rare letters.
BYTE_STAND_INS = range(0x100, 0x144)
TOKENIZER_FILE = "tokenizer.json"
BPE_VOCAB_FILE, BPE_MERGES_FILE = "vocab.json", "merges.txt"

log = logging.getLogger("plm_toolkit")


# Bump when a change to training (or to the text it reads) changes what a trained tokenizer holds.
TRAINING_VERSION = 3


def load_or_train_tokenizer(data_cfg: DataConfig, documents: Any = None) -> Tokenizer:
    """The tokenizer named by `data.tokenizer.path`, or one trained on the training documents (cached); `documents`
    (a `Documents`) replaces them, e.g. both sides of parallel text for a joint vocabulary."""
    tok_cfg = data_cfg.tokenizer
    if tok_cfg.path:
        return load_tokenizer(tok_cfg.path, lowercase=tok_cfg.lowercase is None or bool(tok_cfg.lowercase))
    return train_tokenizer(data_cfg, documents)


def load_tokenizer(path: str | Path, lowercase: bool = True) -> Tokenizer:
    """Load a tokenizer.json, a WordPiece vocab.txt, a byte-level BPE vocab.json (merges.txt beside it), or a folder
    holding one of them (in that order of preference).

    A vocab.txt becomes a BERT tokenizer with lower-casing set by `lowercase` (and must hold BERT's five special
    tokens); a vocab.json a RoBERTa one, or a GPT-2 one when it holds <|endoftext|> instead of <s> and </s>; a
    tokenizer.json keeps its own pipeline, but for GPT-2's vocabulary without a template, which gets GPT-2's (as its
    vocab.json does). Raises DataError naming the file when it is missing or does not load.
    """
    path = Path(os.path.expanduser(str(path)))
    if path.is_dir():
        for name in (TOKENIZER_FILE, "vocab.txt", BPE_VOCAB_FILE):
            if (path / name).is_file():
                path = path / name
                break
        else:
            raise DataError(f"tokenizer folder {path} holds none of {TOKENIZER_FILE}, vocab.txt, {BPE_VOCAB_FILE}")
    if not path.exists():
        raise DataError(f"tokenizer file {path} does not exist; expected a tokenizer.json, vocab.txt or vocab.json")
    reason = not_a_file(path)
    if reason is not None:
        raise DataError(f"tokenizer file {path}: {reason}; expected a tokenizer.json, vocab.txt or vocab.json")
    if path.name == BPE_VOCAB_FILE:
        tokenizer = bpe_files_tokenizer(read_bpe_files(path, path.with_name(BPE_MERGES_FILE)))
    elif path.suffix == ".json":
        text = read_text(path)  # checked: a regular UTF-8 file, its byte-order mark dropped
        try:
            tokenizer = Tokenizer.from_str(text)
        except Exception as e:  # noqa: BLE001 - the Rust side raises plain Exceptions
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise DataError(f"tokenizer file {path} does not load ({first}); expected a tokenizer.json") from e
        tokenizer = with_gpt2_template(tokenizer)
    else:
        tokenizer = bert_tokenizer(models.WordPiece(read_vocab_txt(path), unk_token="[UNK]"), lowercase)
    check_ids(tokenizer, path)
    # A tokenizer.json may keep the padding and truncation its creator used (all-MiniLM-L6-v2's fixed 128): every
    # text would be cut or padded to that length, and the pads masked and predicted. Windows are made here.
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def tokenizer_cache_path(data_cfg: DataConfig, corpus_fingerprint: str) -> Path:
    """Where the tokenizer trained on this corpus with these settings is cached."""
    t = data_cfg.tokenizer
    kind = tokenizer_kind(data_cfg)
    specials = {
        "wordpiece": SPECIAL_TOKENS,
        "gpt2_bpe": GPT2_SPECIAL_TOKENS,
        "t5_unigram": T5_SPECIAL_TOKENS,
        "word": WORD_SPECIAL_TOKENS,
    }.get(kind, BPE_SPECIAL_TOKENS)
    word = kind == "word"  # keeps every word, whatever the size settings (they cut the bilm softmax instead)
    key = stable_hash(
        corpus_fingerprint,
        kind,
        0 if word else int(t.vocab_size),
        lowercase_setting(data_cfg),
        0 if word else int(t.min_frequency),
        specials,
        tokenizers.__version__,
        TRAINING_VERSION,
    )
    return cache_root(data_cfg) / "tokenizers" / f"{key}.json"


def train_tokenizer(data_cfg: DataConfig, documents: Any = None) -> Tokenizer:
    """Train the vocabulary of `data.tokenizer` on a sample of the training files (at most
    `data.tokenizer.train_sample_bytes`, ``sampling.sample_texts``) or on `documents` (a ``Documents``), or load the
    cached one trained on the same files (or contents) and settings."""
    if documents is not None:
        dataset = documents.dataset
        texts = lambda: (text for batch in dataset.iter(batch_size=1000) for text in batch["text"])  # noqa: E731
        return train_cached(data_cfg, documents.fingerprint, texts, len(dataset), documents.source)
    sources = resolve_sources(data_cfg, "train")
    boundary, column = document_boundary(data_cfg), str(data_cfg.text_column)
    budget = int(getattr(data_cfg.tokenizer, "train_sample_bytes", 100_000_000))
    fingerprint = stable_hash("sources", [s.record() for s in sources], boundary, column, budget)
    named = ", ".join(s.path for s in sources)
    sample = (budget, sum(s.size for s in sources))
    return train_cached(
        data_cfg, fingerprint, lambda: sample_texts(sources, budget, boundary, column), source=named, sample=sample
    )


def say_if_smaller(data_cfg: Any, tokenizer: Tokenizer, sample: tuple[int, int] | None) -> None:
    """One line where a trained subword vocabulary came out smaller than data.tokenizer.vocab_size asked: because
    its sample was (``sample``: (data.tokenizer.train_sample_bytes, the training text's bytes)), or because the
    text holds no more pieces."""
    asked, learned = int(data_cfg.tokenizer.vocab_size), tokenizer.get_vocab_size()
    if tokenizer_kind(data_cfg) in ("word", "character") or learned >= asked:
        return
    start = f"data.tokenizer.vocab_size={asked}: the vocabulary learned only {learned} tokens"
    if sample is not None and sample[1] > sample[0]:
        log.warning(
            "%s from its sample of %d bytes (data.tokenizer.train_sample_bytes) of the %.1f MB of training text; "
            "raise train_sample_bytes for more", start, sample[0], sample[1] / 1e6,
        )  # fmt: skip
        return
    read = f" ({sample[1] / 1e6:.2f} MB)" if sample is not None else ""
    log.warning(
        "%s: the whole training text%s gives no more pieces seen data.tokenizer.min_frequency=%d times; the model's "
        "vocabulary has %d rows", start, read, int(data_cfg.tokenizer.min_frequency), learned,
    )  # fmt: skip


def train_cached(
    data_cfg: DataConfig,
    fingerprint: str,
    texts: Callable[[], Iterable[str]],
    length: int | None = None,
    source: str = "",
    sample: tuple[int, int] | None = None,
) -> Tokenizer:
    """The vocabulary trained on ``texts()``, cached under ``fingerprint`` (what identifies the texts); ``source``
    names them in messages; ``sample``: (data.tokenizer.train_sample_bytes, the bytes of text it was taken from)
    where ``texts()`` is a sample. Says so where the vocabulary came out smaller than asked (``say_if_smaller``)."""
    path = tokenizer_cache_path(data_cfg, fingerprint)
    if path.is_file():
        tokenizer = load_tokenizer(path)
    else:
        tokenizer = train_on_texts(data_cfg, texts, length, source)
        _atomic_save(tokenizer, path)
    say_if_smaller(data_cfg, tokenizer, sample)
    return tokenizer


def save_tokenizer(tokenizer: Tokenizer, directory: str | Path) -> Path:
    """Write `directory/tokenizer.json` (checkpoints keep the tokenizer they were trained with)."""
    path = Path(directory) / TOKENIZER_FILE
    _atomic_save(tokenizer, path)
    return path


def _atomic_save(tokenizer: Tokenizer, path: Path) -> None:
    # Several processes (data-parallel ranks) may write the same file: each writes its own temporary name
    # and renames it, so that a reader never sees half a file.
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as temporary:
        tokenizer.save(str(temporary))


def vocab_from_tokenizer(tokenizer: Tokenizer, source: str | Path | None = None) -> Vocab:
    """The roles of the tokenizer's special tokens (``data/tokenization/vocab.py``); a role no token fills is None.
    ``source`` is kept for callers that name the file; nothing is required here."""
    ids = {}
    for role, names in ROLE_TOKENS.items():
        found = [tokenizer.token_to_id(n) for n in names if tokenizer.token_to_id(n) is not None]
        ids[role] = found[0] if found else None
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    return Vocab(
        size=vocabulary_size(tokenizer),
        sentinel_ids=sentinel_ids(tokenizer),
        tokens=tuple(sorted(vocab, key=vocab.__getitem__)),
        continuation_ids=continuation_ids(tokenizer),
        **ids,
    )


def continuation_ids(tokenizer: Tokenizer) -> frozenset[int]:
    """Ids of the pieces that continue a word: WordPiece's (and prefixed BPE's) `##` pieces, or, for byte-level
    BPE, every non-special piece without the leading-space marker. Other models: none (each piece is a word)."""
    model = tokenizer.model
    prefix = getattr(model, "continuing_subword_prefix", None)
    vocab = tokenizer.get_vocab(with_added_tokens=False)
    if prefix:
        return frozenset(i for token, i in vocab.items() if token.startswith(prefix))
    if isinstance(model, models.BPE) and isinstance(tokenizer.pre_tokenizer, pre_tokenizers.ByteLevel):
        specials = {name for names in ROLE_TOKENS.values() for name in names}
        return frozenset(
            i for token, i in vocab.items() if not token.startswith(_BYTE_LEVEL_SPACE) and token not in specials
        )
    return frozenset()
