"""Tokenizers: load a tokenizer.json, a WordPiece vocab.txt or a byte-level BPE vocab.json + merges.txt, or train a
WordPiece (BERT), byte-level BPE (RoBERTa's or GPT-2's special tokens), SentencePiece-style unigram (XLNet),
character or word (ELMo's, ``data/word_vocabulary.py``) vocabulary on the corpus.

Each tokenizer carries its family's template (its post-processor): how one text or a pair is wrapped in special
tokens. The roles of the special tokens (pad, unk, cls, sep, mask, bos, eos, sentinels) are read from it by
``vocab_from_tokenizer``; none is required here, the code that needs one asks for it (``Vocab.require``).

A trained tokenizer is cached as `<cache_dir>/tokenizers/<key>.json`. The key hashes the training split's
contents (the sha256 of each file's bytes, or a saved dataset's fingerprint) together with the tokenizer
settings and the `tokenizers` version, so that editing a file or a setting trains a new one and anything else
reuses the cached file.
"""

from __future__ import annotations

import os
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

import tokenizers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from plm_toolkit.data.corpus import cache_root, choice, read_documents, stable_hash
from plm_toolkit.data.sentinels import NUM_SENTINELS, T5_SPECIAL_TOKENS, add_sentinels, sentinel_ids, t5_unigram_trainer
from plm_toolkit.data.user_files import not_a_file, read_text
from plm_toolkit.data.vocab import ROLE_TOKENS, Vocab
from plm_toolkit.data.vocabulary_files import check_ids, read_bpe_files, read_vocab_txt, vocabulary_size
from plm_toolkit.data.word_vocabulary import WORD_SPECIAL_TOKENS, train_word_tokenizer
from plm_toolkit.errors import DataError

# The special tokens of a trained vocabulary, in id order: [PAD] is 0 so that zero-filled tensors are padding.
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# A trained byte-level BPE vocabulary's, in RoBERTa's (fairseq's) order: <pad> is 1, as its checkpoints expect.
BPE_SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")
# GPT-2's only special token: the end of a text, which also starts one and stands for unknown input.
END_OF_TEXT = "<|endoftext|>"
GPT2_SPECIAL_TOKENS = (END_OF_TEXT,)
# The marker byte-level BPE puts at the start of a piece that follows a space (a byte-level "Ġ").
_BYTE_LEVEL_SPACE = "\u0120"
# The roles a vocab.txt (a BERT WordPiece vocabulary) must fill: its template and MLM need every one.
_BERT_ROLES = ("pad_id", "unk_id", "cls_id", "sep_id", "mask_id")
TOKENIZER_FILE = "tokenizer.json"
BPE_VOCAB_FILE, BPE_MERGES_FILE = "vocab.json", "merges.txt"


def tokenizer_kind(data_cfg: Any) -> str:
    """wordpiece, bpe, gpt2_bpe, unigram, t5_unigram, character or word; ``auto`` (left unresolved by a caller that
    knows no model) means wordpiece."""
    kind = choice(data_cfg.tokenizer.kind)
    return "wordpiece" if kind == "auto" else kind


def load_or_train_tokenizer(data_cfg: Any, documents: Any = None) -> Tokenizer:
    """The tokenizer named by `data.tokenizer.path`, or one trained on the training documents (cached); `documents`
    (a `Documents`) replaces them, e.g. both sides of parallel text for a joint vocabulary."""
    tok_cfg = data_cfg.tokenizer
    if tok_cfg.path:
        return load_tokenizer(tok_cfg.path, lowercase=bool(tok_cfg.lowercase))
    return train_tokenizer(data_cfg, documents)


def load_tokenizer(path: str | Path, lowercase: bool = True) -> Tokenizer:
    """Load a tokenizer.json, a WordPiece vocab.txt, a byte-level BPE vocab.json (merges.txt beside it), or a folder
    holding one of them (in that order of preference).

    A vocab.txt becomes a BERT tokenizer with lower-casing set by `lowercase` (and must hold BERT's five special
    tokens); a vocab.json a RoBERTa one, or a GPT-2 one when it holds <|endoftext|> instead of <s> and </s>; a
    tokenizer.json keeps its own pipeline. Raises DataError naming the file when it is missing or does not load.
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
        tokenizer = _load_bpe_files(path)
    elif path.suffix == ".json":
        text = read_text(path)  # checked: a regular UTF-8 file, its byte-order mark dropped
        try:
            tokenizer = Tokenizer.from_str(text)
        except Exception as e:  # noqa: BLE001 - the Rust side raises plain Exceptions
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise DataError(f"tokenizer file {path} does not load ({first}); expected a tokenizer.json") from e
    else:
        tokenizer = bert_tokenizer(models.WordPiece(read_vocab_txt(path), unk_token="[UNK]"), lowercase)
        vocab = vocab_from_tokenizer(tokenizer)
        for role in _BERT_ROLES:  # fail now, naming the file, if a special token is missing
            if getattr(vocab, role) is None:
                names = " or ".join(ROLE_TOKENS[role])
                raise DataError(f"tokenizer file {path} has no {names} token; expected BERT's special tokens")
    check_ids(tokenizer, path)
    return tokenizer


def _load_bpe_files(vocab_path: Path) -> Tokenizer:
    model = read_bpe_files(vocab_path, vocab_path.with_name(BPE_MERGES_FILE))
    if model.token_to_id(END_OF_TEXT) is not None and model.token_to_id("<s>") is None:
        # GPT-2's files: its tokenizer adds no space before a text (GPT2Tokenizer's add_prefix_space=False).
        return gpt2_tokenizer(model, add_prefix_space=False)
    return byte_level_tokenizer(model)


def byte_level_tokenizer(model: models.Model, add_prefix_space: bool = True) -> Tokenizer:
    """RoBERTa's pipeline around a BPE model: bytes mapped to printable characters, no normalization (cased), and
    `<s> A </s>` / `<s> A </s></s> B </s>` when encoding with special tokens.

    A leading space is added to every text (add_prefix_space): the corpus is tokenized sentence by sentence, and
    a sentence's first word should get the same pieces as it would inside running text.
    """
    tokenizer = Tokenizer(model)
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
    tokenizer.decoder = decoders.ByteLevel()
    _add_bpe_specials(tokenizer)
    return tokenizer


def gpt2_tokenizer(model: models.Model, add_prefix_space: bool = True) -> Tokenizer:
    """GPT-2's pipeline: byte-level BPE with <|endoftext|> as its one special token.

    Its template, for fine-tuning, ends a text with <|endoftext|> (`A <|endoftext|>`, `A <|endoftext|> B
    <|endoftext|>`): the separator of a pair and, seen last by a causal model, the summary token a sentence-level
    head reads (GPT's "extract" token, Radford et al. 2018, section 3.3). Pretraining and generation encode
    without it.
    """
    tokenizer = byte_level_tokenizer(model, add_prefix_space)
    _add_gpt2_specials(tokenizer)
    return tokenizer


def _add_gpt2_specials(tokenizer: Tokenizer) -> None:
    end = tokenizer.token_to_id(END_OF_TEXT)
    if end is None:
        return
    tokenizer.add_special_tokens([END_OF_TEXT])
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {END_OF_TEXT}",
        pair=f"$A {END_OF_TEXT} $B:1 {END_OF_TEXT}:1",
        special_tokens=[(END_OF_TEXT, end)],
    )


def _add_bpe_specials(tokenizer: Tokenizer) -> None:
    present = [t for t in BPE_SPECIAL_TOKENS if tokenizer.token_to_id(t) is not None]
    tokenizer.add_special_tokens(present)
    cls_id, sep_id = tokenizer.token_to_id("<s>"), tokenizer.token_to_id("</s>")
    if cls_id is not None and sep_id is not None:
        tokenizer.post_processor = processors.RobertaProcessing(("</s>", sep_id), ("<s>", cls_id))


def bert_tokenizer(model: models.Model, lowercase: bool) -> Tokenizer:
    """BERT's pipeline around a WordPiece model: normalize, split on whitespace and punctuation, `##` pieces,
    and `[CLS] A [SEP] (B [SEP])` when encoding with special tokens."""
    tokenizer = Tokenizer(model)
    # strip_accents=None follows lowercase, as in BERT's uncased and cased releases.
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    _add_specials(tokenizer)
    return tokenizer


def unigram_tokenizer(lowercase: bool) -> Tokenizer:
    """SentencePiece's pipeline around a unigram LM (Kudo 2018), as XLNet's: NFKC, "▁" marks a preceding space,
    no pre-splitting on punctuation."""
    tokenizer = Tokenizer(models.Unigram())
    steps = [normalizers.NFKC()] + ([normalizers.Lowercase()] if lowercase else [])
    tokenizer.normalizer = normalizers.Sequence(steps)
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    return tokenizer


def character_tokenizer(dataset: Any, vocab_size: int, lowercase: bool) -> Tokenizer:
    """One token per character: the special tokens, then the corpus's characters by falling frequency (at most
    vocab_size in all; rarer ones become [UNK])."""
    counts: Counter[str] = Counter()
    for batch in dataset.iter(batch_size=1000):
        for text in batch["text"]:
            counts.update(text.lower() if lowercase else text)
    characters = [c for c, _ in counts.most_common(max(vocab_size - len(SPECIAL_TOKENS), 1))]
    vocab = {token: i for i, token in enumerate([*SPECIAL_TOKENS, *sorted(characters)])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    if lowercase:
        tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # every character
    tokenizer.decoder = decoders.Fuse()
    return tokenizer


def unigram_trainer(vocab_size: int) -> trainers.UnigramTrainer:
    return trainers.UnigramTrainer(
        vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), unk_token="[UNK]", show_progress=False
    )


def _add_specials(tokenizer: Tokenizer, xlnet_layout: bool = False) -> None:
    """Mark the vocabulary's special tokens as such (never split, skipped when decoding) and add the
    `[CLS] A [SEP] B [SEP]` template (XLNet's `A [SEP] B [SEP] [CLS]` for a unigram vocabulary), which needs
    their ids."""
    present = [t for t in SPECIAL_TOKENS if tokenizer.token_to_id(t) is not None]
    tokenizer.add_special_tokens(present)
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    if cls_id is not None and sep_id is not None and xlnet_layout:
        tokenizer.post_processor = processors.TemplateProcessing(
            single="$A [SEP] [CLS]:2",
            pair="$A [SEP] $B:1 [SEP]:1 [CLS]:2",
            special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
        )
    elif cls_id is not None and sep_id is not None:
        tokenizer.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]",
            pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
        )


# The fewest tokens a trained vocabulary of each kind holds, and what they are. (A word vocabulary keeps every word
# whatever the size.)
MINIMUM_VOCABULARY = {
    "wordpiece": (len(SPECIAL_TOKENS) + 1, "5 special tokens and a piece"),
    "bpe": (len(BPE_SPECIAL_TOKENS) + 256, "5 special tokens and the 256 byte symbols"),
    "gpt2_bpe": (len(GPT2_SPECIAL_TOKENS) + 256, "<|endoftext|> and the 256 byte symbols"),
    "unigram": (len(SPECIAL_TOKENS) + 1, "5 special tokens and a piece"),
    "t5_unigram": (len(T5_SPECIAL_TOKENS) + NUM_SENTINELS + 1, "3 special tokens, 100 sentinels and a piece"),
    "character": (len(SPECIAL_TOKENS) + 1, "5 special tokens and a character"),
}
# Token ids are stored as 32-bit integers.
MAXIMUM_VOCABULARY = 2**31 - 1


def tokenizer_cache_path(data_cfg: Any, corpus_fingerprint: str) -> Path:
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
        bool(t.lowercase) if kind == "wordpiece" else False,
        0 if word else int(t.min_frequency),
        specials,
        tokenizers.__version__,
    )
    return cache_root(data_cfg) / "tokenizers" / f"{key}.json"


def train_tokenizer(data_cfg: Any, documents: Any = None) -> Tokenizer:
    """Train a WordPiece or byte-level BPE vocabulary (`data.tokenizer.kind`) of `data.tokenizer.vocab_size` on the
    training documents (or on `documents`), or load the cached one trained on the same contents and settings."""
    documents = documents or read_documents(data_cfg, "train")
    assert documents is not None  # read_documents raises when the training split has no source
    path = tokenizer_cache_path(data_cfg, documents.fingerprint)
    if path.is_file():
        return load_tokenizer(path)
    t = data_cfg.tokenizer
    kind = tokenizer_kind(data_cfg)
    if kind == "word":
        texts = (text for batch in documents.dataset.iter(batch_size=1000) for text in batch["text"])
        tokenizer = train_word_tokenizer(texts)
        _atomic_save(tokenizer, path)
        return tokenizer
    if kind == "character":
        tokenizer = character_tokenizer(documents.dataset, int(t.vocab_size), bool(t.lowercase))
        _add_specials(tokenizer)
        _atomic_save(tokenizer, path)
        return tokenizer
    if kind in ("bpe", "gpt2_bpe"):
        tokenizer = byte_level_tokenizer(models.BPE())
        trainer = trainers.BpeTrainer(
            vocab_size=int(t.vocab_size),
            min_frequency=int(t.min_frequency),
            special_tokens=list(BPE_SPECIAL_TOKENS if kind == "bpe" else GPT2_SPECIAL_TOKENS),
            # All 256 byte symbols, so that any text encodes without an unknown token.
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        finish = _add_bpe_specials if kind == "bpe" else _add_gpt2_specials
    elif kind == "unigram":
        tokenizer, trainer = unigram_tokenizer(bool(t.lowercase)), unigram_trainer(int(t.vocab_size))
        finish = partial(_add_specials, xlnet_layout=True)
    elif kind == "t5_unigram":  # T5's: cased, <pad> </s> <unk>, 100 sentinels at the top (data/sentinels.py)
        tokenizer, trainer = unigram_tokenizer(lowercase=False), t5_unigram_trainer(int(t.vocab_size))
        finish = add_sentinels
    else:
        tokenizer = bert_tokenizer(models.WordPiece(unk_token="[UNK]"), bool(t.lowercase))
        trainer = trainers.WordPieceTrainer(
            vocab_size=int(t.vocab_size),
            min_frequency=int(t.min_frequency),
            special_tokens=list(SPECIAL_TOKENS),
            continuing_subword_prefix="##",
            show_progress=False,
        )
        finish = _add_specials
    dataset = documents.dataset

    def batches():
        for batch in dataset.iter(batch_size=1000):
            yield batch["text"]

    try:
        tokenizer.train_from_iterator(batches(), trainer=trainer, length=len(dataset))
    except Exception as e:  # noqa: BLE001 - the Rust side raises plain Exceptions
        if "not large enough to contain all chars" not in str(e):
            raise
        characters = len({c for texts in batches() for text in texts for c in text if not c.isspace()})
        needs = f"every distinct character ({characters}) and its special tokens"
        raise _too_small(t.vocab_size, kind, documents, needs) from None
    finish(tokenizer)  # the template needs the ids of [CLS] and [SEP], which exist only now
    if vocabulary_size(tokenizer) > int(t.vocab_size):  # the trainer keeps every character, whatever the size
        needs = f"at least {vocabulary_size(tokenizer)} tokens (its special tokens and every distinct character)"
        raise _too_small(t.vocab_size, kind, documents, needs)
    _atomic_save(tokenizer, path)
    return tokenizer


def _too_small(vocab_size: int, kind: str, documents: Any, needs: str) -> DataError:
    return DataError(
        f"data.tokenizer.vocab_size={vocab_size}: a {kind} vocabulary of {documents.source} holds {needs}; raise "
        "data.tokenizer.vocab_size"
    )


def save_tokenizer(tokenizer: Tokenizer, directory: str | Path) -> Path:
    """Write `directory/tokenizer.json` (checkpoints keep the tokenizer they were trained with)."""
    path = Path(directory) / TOKENIZER_FILE
    _atomic_save(tokenizer, path)
    return path


def _atomic_save(tokenizer: Tokenizer, path: Path) -> None:
    # Several processes (data-parallel ranks) may write the same file: each writes its own temporary name
    # and renames it, so that a reader never sees half a file.
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tokenizer.save(str(temporary))
    os.replace(temporary, path)


def vocab_from_tokenizer(tokenizer: Tokenizer, source: str | Path | None = None) -> Vocab:
    """The roles of the tokenizer's special tokens (``data/vocab.py``); a role no token fills is None.
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
