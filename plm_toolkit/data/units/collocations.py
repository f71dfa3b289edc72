"""Phrases learned from the corpus by collocation scores, as word2vec's word2phrase does (Mikolov et al. 2013,
"Distributed Representations of Words and Phrases and their Compositionality", section 4).

A pass counts words and adjacent word pairs and joins a pair (a, b) into one unit when

    score(a, b) = (count(a b) - min_count) / (count(a) * count(b)) * total_words  >  threshold

and a and b each occur at least ``min_count`` times. Pairs are joined left to right as in word2phrase; the next
pass counts over the joined units, so two passes find phrases of up to four words ("New York Stock Exchange").
Only words with a letter or digit take part (no phrase spans punctuation), and counts are case-sensitive, as in
word2phrase.

A pass over a large corpus counts each piece of it in a worker process (``count_piece``) and merges the counts
(``merge_counts``); a piece's counts are written to disk in sorted runs whenever they reach SPILL_ENTRIES, and the
runs of all pieces are merged as streams, so no process holds more than a piece's share of the counts: what the
merge keeps is the units seen at least ``min_count`` times and the pairs it joins. ``learn_phrases`` does the same
in memory, for a corpus given as sentences.

Written here rather than taken from gensim's Phrases, which has the same score, to avoid a dependency that brings
its own numpy/scipy pins, and because it counts in memory.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from plm_toolkit.core.atomic import atomic_file

Unit = tuple[str, ...]
Pair = tuple[Unit, Unit]

# Distinct units and pairs a process counts before it writes them to a sorted run on disk (about 200 bytes each).
SPILL_ENTRIES = 100_000
# Separators of a count key (never in a word: words hold no whitespace, and these are whitespace to Python).
_WORD, _HALF = "\x1f", "\x1e"


def _wordlike(unit: Unit) -> bool:
    return all(any(c.isalnum() for c in word) for word in unit)


def join_pairs(units: Sequence[Unit], pairs: set[Pair]) -> list[Unit]:
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


def sentence_units(words: Sequence[str], joined: Sequence[set[Pair]]) -> tuple[list[Unit], list[Pair]]:
    """A sentence's units after the joins of the earlier passes, and its adjacent pairs of word-like units."""
    units = [(w,) for w in words]
    for pairs in joined:
        units = join_pairs(units, pairs)
    return units, [(a, b) for a, b in zip(units, units[1:], strict=False) if _wordlike(a) and _wordlike(b)]


def joins(count: int, count_a: int, count_b: int, total: int, min_count: int, threshold: float) -> bool:
    """Whether a pair seen ``count`` times, of units seen ``count_a`` and ``count_b`` times, joins."""
    if count < min_count or count_a < min_count or count_b < min_count:
        return False
    return (count - min_count) / (count_a * count_b) * total > threshold


def learn_phrases(
    sentences: Callable[[], Iterable[Sequence[str]]], min_count: int = 5, threshold: float = 100.0, passes: int = 2
) -> set[Unit]:
    """The phrases (tuples of two words or more) that ``passes`` word2phrase passes find; ``sentences()`` yields
    each sentence's words afresh for every pass. Counts in memory."""
    joined: list[set[Pair]] = []
    for _ in range(passes):
        unigrams: Counter[Unit] = Counter()
        bigrams: Counter[Pair] = Counter()
        total = 0
        for words in sentences():
            units, pairs = sentence_units(words, joined)
            unigrams.update(units)
            total += len(units)
            bigrams.update(pairs)
        found = {
            (a, b)
            for (a, b), count in bigrams.items()
            if joins(count, unigrams[a], unigrams[b], total, min_count, threshold)
        }
        if not found:
            break
        joined.append(found)
    return phrases_of(joined)


def phrases_of(joined: Sequence[set[Pair]]) -> set[Unit]:
    return {a + b for pairs in joined for a, b in pairs}


# --- counting in pieces -----------------------------------------------------------------------------------


def _key(unit: Unit) -> str:
    return _WORD.join(unit)


def _unit(key: str) -> Unit:
    return tuple(key.split(_WORD))


class SpilledCounts:
    """Counts of units and pairs written to ``folder`` as sorted runs (``<stem>-<n>.units`` / ``.pairs``: lines of
    ``key<TAB>count``) whenever SPILL_ENTRIES distinct entries are held."""

    def __init__(self, folder: Path, stem: str, spill_entries: int = SPILL_ENTRIES):
        self.folder, self.stem, self.spill_entries = Path(folder), stem, spill_entries
        self.units: Counter[str] = Counter()
        self.pairs: Counter[str] = Counter()
        self.total = 0
        self.lettered = 0  # words with a letter
        self.runs = 0

    def add(self, units: list[Unit], pairs: list[Pair]) -> None:
        self.units.update(map(_key, units))
        self.pairs.update(_key(a) + _HALF + _key(b) for a, b in pairs)
        self.total += len(units)
        self.lettered += sum(any(c.isalpha() for c in word) for unit in units for word in unit)
        if len(self.units) + len(self.pairs) >= self.spill_entries:
            self.spill()

    def spill(self) -> None:
        for suffix, counts in (("units", self.units), ("pairs", self.pairs)):
            path = self.folder / f"{self.stem}-{self.runs:04d}.{suffix}"
            with atomic_file(path) as temporary, open(temporary, "w", encoding="utf-8") as f:
                f.writelines(f"{key}\t{count}\n" for key, count in sorted(counts.items()))
            counts.clear()
        self.runs += 1


def _read_run(path: Path) -> Iterator[tuple[str, int]]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            key, count = line.rstrip("\n").rsplit("\t", 1)
            yield key, int(count)


def _summed(paths: list[Path]) -> Iterator[tuple[str, int]]:
    """(key, count summed over the runs) in key order."""
    merged = heapq.merge(*(_read_run(p) for p in paths), key=lambda item: item[0])
    for key, group in itertools.groupby(merged, key=lambda item: item[0]):
        yield key, sum(count for _, count in group)


def merge_counts(folder: Path, total: int, min_count: int, threshold: float) -> set[Pair]:
    """The pairs that join, from every run in ``folder`` (``total``: the units counted over all pieces)."""
    frequent = {key: count for key, count in _summed(sorted(folder.glob("*.units"))) if count >= min_count}
    found = set()
    for key, count in _summed(sorted(folder.glob("*.pairs"))):
        a, b = key.split(_HALF)
        if a in frequent and b in frequent and joins(count, frequent[a], frequent[b], total, min_count, threshold):
            found.add((_unit(a), _unit(b)))
    return found
