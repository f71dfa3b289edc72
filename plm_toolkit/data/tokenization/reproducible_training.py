"""The same vocabulary from the same text on every run and machine, where the tokenizers library's trainers are not
reproducible on their own (huggingface/tokenizers#1794, as of 0.23).

WordPiece: the trainer gives each continuing-subword symbol (``##e``) its id in the order it meets the words, which
it keeps in a hash map seeded at random per process; equal pair counts are then broken by those ids, so that two
runs merge differently (on the bundled WikiText, 4,000 pieces: 6 pieces differ and about 450 ids move between any
two runs). Here the symbols are found first (a training that stops before any merge) and handed to the trainer as
its first tokens, in sorted order, so that every id is decided before the merges; they are then made ordinary
vocabulary entries again.

Unigram: the pieces come out sorted by score, and scores that agree to 14 digits differ in the last bits from run
to run (sums in hash-map order), which swaps the ids of pieces of about equal score; the characters it appends last
get their scores in hash-map order. Here the scores are rounded and the pieces sorted by (score, piece), and the
appended characters take their scores in the characters' order.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable

from tokenizers import Tokenizer, trainers

# Digits a unigram piece's score keeps: far above the trainer's own noise (about 1e-15), far below what separates
# two pieces' probabilities in practice.
SCORE_DIGITS = 8


def continuation_symbols(
    fresh: Callable[[], Tokenizer], batches: Callable[[], Iterable[list[str]]], prefix: str
) -> list[str]:
    """Every ``prefix`` symbol (``##`` and a character) that a WordPiece training of ``fresh()``'s pipeline on
    ``batches()`` creates, sorted: the vocabulary of a training that stops before the first merge."""
    probe = fresh()
    trainer = trainers.WordPieceTrainer(vocab_size=0, continuing_subword_prefix=prefix, show_progress=False)
    probe.train_from_iterator(batches(), trainer=trainer)
    return sorted(token for token in probe.get_vocab(with_added_tokens=False) if token.startswith(prefix))


def as_plain_tokens(tokenizer: Tokenizer, symbols: list[str]) -> Tokenizer:
    """``tokenizer`` with ``symbols`` (given to the trainer as special tokens, so that they took the first ids) as
    ordinary vocabulary entries: split off nowhere in the text, kept when decoding."""
    spec = json.loads(tokenizer.to_str())
    dropped = set(symbols)
    spec["added_tokens"] = [token for token in spec["added_tokens"] if token["content"] not in dropped]
    return Tokenizer.from_str(json.dumps(spec))


def canonical_unigram(tokenizer: Tokenizer, specials: int) -> Tokenizer:
    """``tokenizer`` (a trained unigram model whose first ``specials`` pieces are its special tokens) with the
    other pieces' scores rounded to SCORE_DIGITS and the pieces sorted by falling score, then by the piece."""
    spec = json.loads(tokenizer.to_str())
    vocab = spec["model"]["vocab"]
    pieces = sorted(((piece, round(score, SCORE_DIGITS)) for piece, score in vocab[specials:]),
                    key=lambda item: (-item[1], item[0]))  # fmt: skip
    # The characters the trainer appends last (those the pieces lack) get scores that step down in the order it
    # meets them: the same characters and scores, paired in the characters' order.
    tail = len(pieces)
    while tail > 0 and len(pieces[tail - 1][0]) == 1:
        tail -= 1
    characters = sorted(piece for piece, _ in pieces[tail:])
    pieces[tail:] = zip(characters, sorted((score for _, score in pieces[tail:]), reverse=True), strict=True)
    spec["model"]["vocab"] = [*vocab[:specials], *([piece, score] for piece, score in pieces)]
    return Tokenizer.from_str(json.dumps(spec))
