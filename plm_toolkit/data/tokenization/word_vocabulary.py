"""Word-level vocabularies (``data.tokenizer.kind=word``): ELMo's softmax vocabulary, as bilm-tf's vocab file holds it:
``<S>``, ``</S>``, ``<UNK>``, then words by falling frequency.

Text is split on whitespace only (the corpus is expected to be tokenized, as bilm-tf's is) and kept cased: the
character CNN reads every word's spelling. A trained vocabulary keeps every word of the training split, so that the
training data names each word exactly (the character CNN reads rare words too); the ``bilm`` objective's softmax
covers only the first ``objective.softmax_size`` ids and predicts ``<UNK>`` for the rest. Sentences are framed
``<S> ... </S>``, and a pair ``<S> A </S> <S> B </S>``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers, processors

from plm_toolkit.core.errors import DataError
from plm_toolkit.data.sources.user_files import iter_lines
from plm_toolkit.data.tokenization.characters import BOS_TOKEN, EOS_TOKEN

UNK_TOKEN = "<UNK>"
WORD_SPECIAL_TOKENS = (BOS_TOKEN, EOS_TOKEN, UNK_TOKEN)


def word_tokenizer(words: Iterable[str]) -> Tokenizer:
    """A whitespace word tokenizer over ``<S> </S> <UNK>`` followed by ``words`` (repeats ignored), in that id order."""
    vocab: dict[str, int] = {}
    for word in (*WORD_SPECIAL_TOKENS, *words):
        vocab.setdefault(word, len(vocab))
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=UNK_TOKEN))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens([BOS_TOKEN, EOS_TOKEN])
    bos, eos = vocab[BOS_TOKEN], vocab[EOS_TOKEN]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS_TOKEN} $A {EOS_TOKEN}",
        pair=f"{BOS_TOKEN} $A {EOS_TOKEN} {BOS_TOKEN}:1 $B:1 {EOS_TOKEN}:1",
        special_tokens=[(BOS_TOKEN, bos), (EOS_TOKEN, eos)],
    )
    return tokenizer


def train_word_tokenizer(texts: Iterable[str]) -> Tokenizer:
    """Every whitespace-separated word of ``texts``, most frequent first (ties in first-seen order)."""
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(text.split())
    for special in WORD_SPECIAL_TOKENS:
        counts.pop(special, None)
    if not counts:
        raise DataError("the training files hold no words to build a word vocabulary from")
    return word_tokenizer(word for word, _ in counts.most_common())


def read_bilm_vocab(path: Path) -> Tokenizer:
    """A bilm-tf vocabulary file: one word per line (``!!!MAXTERMID`` skipped, as bilm-tf does); a word on two lines
    is refused (its id would be one line's, and every later word's would shift by one)."""
    first: dict[str, int] = {}
    for number, line in iter_lines(path):
        word = line.strip()
        if not word or word == "!!!MAXTERMID":
            continue
        if word in first:
            raise DataError(f"{path}:{number}: {word!r} again (line {first[word]}); expected each word on one line")
        first[word] = number
    return word_tokenizer(first)


def write_bilm_vocab(tokenizer: Tokenizer, path: Path) -> bool:
    """A word tokenizer's words as a bilm-tf vocabulary file, one per line in id order (what ``read_bilm_vocab``
    reads back); False, writing nothing, for a tokenizer of another kind."""
    if not isinstance(tokenizer.model, models.WordLevel):
        return False
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    path.write_text("".join(f"{word}\n" for word in sorted(vocab, key=vocab.__getitem__)), encoding="utf-8")
    return True
