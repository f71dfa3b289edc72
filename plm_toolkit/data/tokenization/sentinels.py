"""T5's vocabulary: a SentencePiece-style unigram LM with ``<pad>`` = 0, ``</s>`` = 1, ``<unk>`` = 2 and 100
sentinels ``<extra_id_0>`` ... ``<extra_id_99>`` at the end, ``<extra_id_0>`` holding the last id (T5's
``SentencePieceVocabulary(extra_ids=100)``: the sentinels count down from the top of the vocabulary).

The vocabulary is trained with `tokenizers`' unigram trainer (the same algorithm as SentencePiece's, Kudo 2018;
no sentencepiece dependency), or loaded from a ``tokenizer.json`` in the layout of the released T5 tokenizers
(transformers' ``T5Tokenizer``: the sentinels in the unigram model and as added special tokens).
"""

from __future__ import annotations

from tokenizers import Tokenizer, processors, trainers

from plm_toolkit.core.errors import DataError

T5_SPECIAL_TOKENS = ("<pad>", "</s>", "<unk>")
# T5's sentinel token names; sentinel k is the k-th span of a corrupted sequence.
SENTINEL = "<extra_id_{}>"
NUM_SENTINELS = 100


def add_sentinels(tokenizer: Tokenizer, count: int = NUM_SENTINELS) -> None:
    """Append ``count`` sentinels as special tokens (never split, skipped when decoding), the highest-numbered
    first, so that ``<extra_id_0>`` takes the last id; then T5's ``A </s>`` / ``A </s> B </s>`` template."""
    tokenizer.add_special_tokens([SENTINEL.format(k) for k in reversed(range(count))])
    eos_id = tokenizer.token_to_id("</s>")
    if eos_id is not None:
        tokenizer.post_processor = processors.TemplateProcessing(
            single="$A </s>", pair="$A </s> $B:1 </s>:1", special_tokens=[("</s>", eos_id)]
        )


def sentinel_ids(tokenizer: Tokenizer) -> tuple[int, ...]:
    """Ids of ``<extra_id_0>``, ``<extra_id_1>``, ... for as long as they are consecutive from 0; empty when the
    vocabulary has none."""
    ids: list[int] = []
    while (token_id := tokenizer.token_to_id(SENTINEL.format(len(ids)))) is not None:
        ids.append(token_id)
    return tuple(ids)


def check_sentinels(ids: tuple[int, ...], vocab_size: int, source: str = "the tokenizer") -> None:
    """DataError unless the vocabulary has sentinels counting down by one from its last id, as T5's span
    corruption and its released checkpoints lay them out."""
    if not ids:
        raise DataError(
            f"{source} has no sentinel tokens (<extra_id_0>, <extra_id_1>, ...); span corruption replaces every "
            f"span by one: use a T5 vocabulary (data.tokenizer.kind=t5_unigram, the T5 presets' choice, trains one "
            f"with {NUM_SENTINELS})"
        )
    expected = tuple(range(vocab_size - 1, vocab_size - 1 - len(ids), -1))
    if ids != expected:
        raise DataError(
            f"{source}: the sentinels are not the vocabulary's last ids counting down from <extra_id_0> = "
            f"{vocab_size - 1} (found <extra_id_0> = {ids[0]}); expected T5's layout"
        )


def t5_unigram_trainer(vocab_size: int, num_sentinels: int = NUM_SENTINELS) -> trainers.UnigramTrainer:
    """A unigram trainer for ``vocab_size`` tokens in all: T5's three special tokens first, room left for the
    sentinels that ``add_sentinels`` appends after training."""
    if vocab_size <= num_sentinels + len(T5_SPECIAL_TOKENS):
        raise DataError(
            f"data.tokenizer.vocab_size={vocab_size} leaves no room for pieces beside {len(T5_SPECIAL_TOKENS)} "
            f"special tokens and {num_sentinels} sentinels"
        )
    return trainers.UnigramTrainer(
        vocab_size=vocab_size - num_sentinels,
        special_tokens=list(T5_SPECIAL_TOKENS),
        unk_token="<unk>",
        show_progress=False,
    )
