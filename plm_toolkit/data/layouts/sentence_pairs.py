"""BERT's sentence pairs (NSP's A and B): segment pairs drawn from a document, the random B from another document,
and the cutting of overlong sentences. Used by the sentence_pairs and segment_pairs layouts (data/layouts/pretraining.py)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

# A sentence longer than this many pairs is cut into pair-sized pieces instead of truncated.
LONG_SENTENCE_PAIRS = 4


class SplitDocuments:
    """Document j's sentences (long ones split) by index, for segment B drawn from another document: the last few
    are kept, so a long document is read from the store once, not once per pair. ``sentences(j)``: document j's
    sentences as token-id lists."""

    def __init__(self, count: int, sentences: Callable[[int], list[list[int]]], max_tokens: int, size: int = 8):
        self.count, self.sentences, self.max_tokens, self.size = count, sentences, max_tokens, size
        self.kept: dict[int, list[list[int]]] = {}

    def __len__(self) -> int:
        return self.count

    def keep(self, index: int, sentences: list[list[int]]) -> None:
        self.kept.pop(index, None)
        self.kept[index] = sentences
        while len(self.kept) > self.size:
            del self.kept[next(iter(self.kept))]

    def __getitem__(self, index: int) -> list[list[int]]:
        if index not in self.kept:
            self.keep(index, split_long_sentences(self.sentences(index), self.max_tokens)[0])
        return self.kept[index]


def split_long_sentences(document: list[list[int]], max_tokens: int) -> tuple[list[list[int]], int]:
    """The document with every sentence longer than LONG_SENTENCE_PAIRS pairs cut into pieces of ``max_tokens``
    (what a pair holds), and how many sentences were cut. Keeps all the text, in order.

    A sentence a little longer than a pair is left whole, to be truncated as BERT's reference does (splitting
    those changes the pairs measurably); one far longer is a text the sentence splitter found no end in (a
    paragraph without punctuation, a list, a one-line corpus), whose truncation would drop nearly all of it."""
    limit = LONG_SENTENCE_PAIRS * max_tokens
    if all(len(sentence) <= limit for sentence in document):
        return document, 0
    pieces, split = [], 0
    for sentence in document:
        if len(sentence) > limit:
            split += 1
            pieces.extend(sentence[i : i + max_tokens] for i in range(0, len(sentence), max_tokens))
        else:
            pieces.append(sentence)
    return pieces, split


def document_pairs(
    document: list[list[int]],
    index: int,
    documents: Any,
    max_seq_len: int,
    short_seq_prob: float,
    random_next_prob: float,
    rng: random.Random,
    contiguous: bool = False,
):
    """Yield (tokens_a, tokens_b, next_sentence_label) for one document, as BERT's create_pretraining_data.py
    (create_instances_from_document) does; `documents[j]` is document j's sentences.

    Whole sentences gather into a chunk until it reaches the target length; the chunk splits at a random
    sentence boundary into A and B. With probability `random_next_prob` (and always when the chunk is a single
    sentence) B is instead read from a random other document (label 1) and the sentences after A go back to be
    used by the next chunk; otherwise B is A's continuation (label 0). Unlike the reference, which draws one
    target per document, a short target is drawn per chunk so that `short_seq_prob` is the share of pairs.
    """
    max_tokens = max_seq_len - 3  # [CLS] A [SEP] B [SEP]
    chunk: list[list[int]] = []
    length = 0
    target = _target_length(max_tokens, short_seq_prob, rng)
    i = 0
    while i < len(document):
        chunk.append(document[i])
        length += len(document[i])
        if contiguous and (i == len(document) - 1 or length >= target):
            if len(chunk) >= 2:
                a_end = rng.randint(1, len(chunk) - 1)
                tokens_a = [t for sentence in chunk[:a_end] for t in sentence]
                tokens_b = [t for sentence in chunk[a_end:] for t in sentence]
            else:
                cut = rng.randint(1, len(chunk[0]) - 1) if len(chunk[0]) >= 2 else 0
                tokens_a, tokens_b = chunk[0][:cut], chunk[0][cut:]
            if tokens_a and tokens_b:
                _truncate_pair(tokens_a, tokens_b, max_tokens, rng)
                yield tokens_a, tokens_b, 0
            chunk, length = [], 0
            target = _target_length(max_tokens, short_seq_prob, rng)
        elif i == len(document) - 1 or length >= target:
            a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            tokens_a = [t for sentence in chunk[:a_end] for t in sentence]
            if len(chunk) == 1 or rng.random() < random_next_prob:
                label = 1
                following = i - len(chunk) + 1 + a_end  # the sentence that really follows A
                tokens_b = _random_segment(documents, index, following, max(target - len(tokens_a), 1), rng)
                i -= len(chunk) - a_end  # put the unused sentences back
            else:
                label = 0
                tokens_b = [t for sentence in chunk[a_end:] for t in sentence]
            _truncate_pair(tokens_a, tokens_b, max_tokens, rng)
            yield tokens_a, tokens_b, label
            chunk, length = [], 0
            target = _target_length(max_tokens, short_seq_prob, rng)
        i += 1


def _target_length(max_tokens: int, short_seq_prob: float, rng: random.Random) -> int:
    # BERT mostly fills the sequence, but sometimes trains on short ones to close the gap between
    # pretraining and fine-tuning on short inputs.
    return rng.randint(2, max_tokens) if rng.random() < short_seq_prob else max_tokens


def _random_segment(documents: Any, index: int, following: int, target: int, rng: random.Random) -> list[int]:
    """Sentences from a random position of a random document other than `index`, up to `target` tokens.

    A corpus of one document has no other: B then starts anywhere in it but at `following` (A's real next
    sentence), which is what the reference ends up doing after ten tries to draw another document.
    """
    if len(documents) > 1:
        other = rng.randrange(len(documents) - 1)
        other += other >= index  # uniform over the other documents
        sentences = documents[other]
        start = rng.randrange(len(sentences))
    else:
        sentences = documents[index]
        start = rng.randrange(max(len(sentences) - 1, 1))
        start += len(sentences) > 1 and start >= following
    tokens: list[int] = []
    for k in range(start, len(sentences)):  # by index: a slice would copy the rest of a long document
        tokens.extend(sentences[k])
        if len(tokens) >= target:
            break
    return tokens


def _truncate_pair(tokens_a: list[int], tokens_b: list[int], max_tokens: int, rng: random.Random) -> None:
    """Trim the longer segment one token at a time, from the front or the back at random, until the pair fits (in
    place), as BERT's truncate_seq_pair does; computed with slices, so the cost is linear in the pair's length."""
    excess = len(tokens_a) + len(tokens_b) - max_tokens
    if excess <= 0:
        return
    # The longer segment loses tokens until the two are even; then B and A lose one in turn, B first.
    gap = min(abs(len(tokens_a) - len(tokens_b)), excess)
    rest = excess - gap
    cut_a = rest // 2 + (gap if len(tokens_a) > len(tokens_b) else 0)
    cut_b = excess - cut_a
    for tokens, cut in ((tokens_a, cut_a), (tokens_b, cut_b)):
        # Trimming both ends at random avoids a bias towards sentence beginnings or ends.
        front = sum(rng.random() < 0.5 for _ in range(cut))
        del tokens[:front]
        del tokens[len(tokens) - (cut - front) :]
