"""Phrases learned from the corpus by collocation scores, as word2vec's word2phrase does (Mikolov et al. 2013,
"Distributed Representations of Words and Phrases and their Compositionality", section 4).

A pass counts words and adjacent word pairs and joins a pair (a, b) into one unit when

    score(a, b) = (count(a b) - min_count) / (count(a) * count(b)) * total_words  >  threshold

and a and b each occur at least ``min_count`` times. Pairs are joined left to right as in word2phrase; the next
pass counts over the joined units, so two passes find phrases of up to four words ("New York Stock Exchange").
Only words with a letter or digit take part (no phrase spans punctuation), and counts are case-sensitive, as in
word2phrase. The counts are held in memory (a Counter of the pairs), which suits corpora up to some 100M words.

Written here rather than taken from gensim's Phrases, which has the same score, to avoid a dependency that brings
its own numpy/scipy pins for about forty lines.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence

Unit = tuple[str, ...]


def _wordlike(unit: Unit) -> bool:
    return all(any(c.isalnum() for c in word) for word in unit)


def join_pairs(units: Sequence[Unit], pairs: set[tuple[Unit, Unit]]) -> list[Unit]:
    """Join adjacent units that form one of ``pairs``, left to right (a joined unit is not joined again here)."""
    out: list[Unit] = []
    i = 0
    while i < len(units):
        if i + 1 < len(units) and (units[i], units[i + 1]) in pairs:
            out.append(units[i] + units[i + 1])
            i += 2
        else:
            out.append(units[i])
            i += 1
    return out


def learn_phrases(
    sentences: Callable[[], Iterable[Sequence[str]]], min_count: int = 5, threshold: float = 100.0, passes: int = 2
) -> set[Unit]:
    """The phrases (tuples of two words or more) that ``passes`` word2phrase passes find; ``sentences()`` yields
    each sentence's words afresh for every pass."""
    joined: list[set[tuple[Unit, Unit]]] = []
    for _ in range(passes):
        unigrams: Counter[Unit] = Counter()
        bigrams: Counter[tuple[Unit, Unit]] = Counter()
        total = 0
        for words in sentences():
            units = [(w,) for w in words]
            for pairs in joined:
                units = join_pairs(units, pairs)
            unigrams.update(units)
            total += len(units)
            bigrams.update((a, b) for a, b in zip(units, units[1:], strict=False) if _wordlike(a) and _wordlike(b))
        found = set()
        for (a, b), count in bigrams.items():
            if count < min_count or unigrams[a] < min_count or unigrams[b] < min_count:
                continue
            if (count - min_count) / (unigrams[a] * unigrams[b]) * total > threshold:
                found.add((a, b))
        if not found:
            break
        joined.append(found)
    return {a + b for pairs in joined for a, b in pairs}
