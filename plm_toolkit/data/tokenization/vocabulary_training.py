"""Training a vocabulary of each ``data.tokenizer.kind`` on texts: WordPiece (BERT), byte-level BPE (RoBERTa's or
GPT-2's special tokens), SentencePiece-style unigram (XLNet's, or T5's with its sentinels), character, or word (ELMo's,
``data/tokenization/word_vocabulary.py``); the sizes each kind allows, and the kind and lower-casing a
``data.tokenizer`` config asks for. Caching a trained tokenizer and loading one are ``tokenizer.py``'s.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from plm_toolkit.core.choices import choice
from plm_toolkit.core.errors import DataError
from plm_toolkit.data.tokenization.pipelines import (
    BPE_SPECIAL_TOKENS,
    GPT2_SPECIAL_TOKENS,
    SPECIAL_TOKENS,
    _add_bpe_specials,
    _add_gpt2_specials,
    _add_specials,
    bert_tokenizer,
    byte_level_tokenizer,
    unigram_tokenizer,
)
from plm_toolkit.data.tokenization.reproducible_training import (
    as_plain_tokens,
    canonical_unigram,
    continuation_symbols,
)
from plm_toolkit.data.tokenization.sentinels import NUM_SENTINELS, T5_SPECIAL_TOKENS, add_sentinels, t5_unigram_trainer
from plm_toolkit.data.tokenization.vocabulary_files import vocabulary_size
from plm_toolkit.data.tokenization.word_vocabulary import train_word_tokenizer

if TYPE_CHECKING:
    from plm_toolkit.core.data_schema import DataConfig


def tokenizer_kind(data_cfg: DataConfig) -> str:
    """data.tokenizer.kind: wordpiece, bpe, gpt2_bpe, unigram, t5_unigram, character or word. A run's data group
    has it resolved already (``auto`` takes the model preset's vocabulary: config/resolve.py); ``auto`` in a data
    group that no run resolved is wordpiece."""
    kind = choice(data_cfg.tokenizer.kind)
    return "wordpiece" if kind == "auto" else kind


# Kinds whose pipeline lower-cases when data.tokenizer.lowercase says so, with their default (lowercase: null).
LOWERCASE_DEFAULTS = {"wordpiece": True, "unigram": True, "character": False}


def lowercase_setting(data_cfg: DataConfig) -> bool:
    """Whether the tokenizer lower-cases: data.tokenizer.lowercase, or the kind's default when it is null; False
    for the kinds that are always cased."""
    kind = tokenizer_kind(data_cfg)
    value = data_cfg.tokenizer.lowercase
    if kind not in LOWERCASE_DEFAULTS:
        return False
    return LOWERCASE_DEFAULTS[kind] if value is None else bool(value)


def character_tokenizer(texts: Iterable[str], vocab_size: int, lowercase: bool) -> Tokenizer:
    """One token per character: the special tokens, then the corpus's characters by falling frequency (at most
    vocab_size in all; rarer ones become [UNK])."""
    counts: Counter[str] = Counter()
    for text in texts:
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


def train_on_texts(
    data_cfg: DataConfig, texts: Callable[[], Iterable[str]], length: int | None = None, source: str = "the corpus"
) -> Tokenizer:
    """A vocabulary of `data.tokenizer.kind` and `data.tokenizer.vocab_size` trained on the texts that ``texts()``
    yields (``length``: how many, for the trainer's own bookkeeping; ``source``: the files, for messages)."""
    t = data_cfg.tokenizer
    kind = tokenizer_kind(data_cfg)

    def batches():
        batch = []
        for text in texts():
            batch.append(text)
            if len(batch) == 1000:
                yield batch
                batch = []
        if batch:
            yield batch

    symbols: list[str] = []
    if kind == "word":
        return train_word_tokenizer(texts())
    if kind == "character":
        tokenizer = character_tokenizer(texts(), int(t.vocab_size), lowercase_setting(data_cfg))
        _add_specials(tokenizer)
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
        tokenizer, trainer = unigram_tokenizer(lowercase_setting(data_cfg)), unigram_trainer(int(t.vocab_size))
        finish = partial(_add_specials, xlnet_layout=True)
    elif (
        kind == "t5_unigram"
    ):  # T5's: cased, <pad> </s> <unk>, 100 sentinels at the top (data/tokenization/sentinels.py)
        tokenizer, trainer = unigram_tokenizer(lowercase=False), t5_unigram_trainer(int(t.vocab_size))
        finish = add_sentinels
    else:

        def wordpiece() -> Tokenizer:
            return bert_tokenizer(models.WordPiece(unk_token="[UNK]"), lowercase_setting(data_cfg))

        # The `##` symbols take their ids before any merge (data/tokenization/reproducible_training.py).
        symbols = continuation_symbols(wordpiece, batches, "##")
        tokenizer = wordpiece()
        trainer = trainers.WordPieceTrainer(
            vocab_size=int(t.vocab_size),
            min_frequency=int(t.min_frequency),
            special_tokens=[*SPECIAL_TOKENS, *symbols],
            continuing_subword_prefix="##",
            show_progress=False,
        )
        finish = _add_specials

    try:
        tokenizer.train_from_iterator(batches(), trainer=trainer, length=length)
    except Exception as e:  # noqa: BLE001 - the Rust side raises plain Exceptions
        if "not large enough to contain all chars" not in str(e):
            raise
        characters = len({c for texts in batches() for text in texts for c in text if not c.isspace()})
        needs = f"every distinct character ({characters}) and its special tokens"
        raise _too_small(t.vocab_size, kind, source, needs) from None
    if symbols:
        tokenizer = as_plain_tokens(tokenizer, symbols)
    if kind in ("unigram", "t5_unigram"):
        tokenizer = canonical_unigram(tokenizer, len(T5_SPECIAL_TOKENS if kind == "t5_unigram" else SPECIAL_TOKENS))
    finish(tokenizer)  # the template needs the ids of [CLS] and [SEP], which exist only now
    if vocabulary_size(tokenizer) > int(t.vocab_size):  # the trainer keeps every character, whatever the size
        needs = f"at least {vocabulary_size(tokenizer)} tokens (its special tokens and every distinct character)"
        raise _too_small(t.vocab_size, kind, source, needs)
    return tokenizer


def _too_small(vocab_size: int, kind: str, source: str, needs: str) -> DataError:
    return DataError(
        f"data.tokenizer.vocab_size={vocab_size}: a {kind} vocabulary of {source or 'the corpus'} holds {needs}; "
        "raise data.tokenizer.vocab_size"
    )
