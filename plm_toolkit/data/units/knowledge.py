"""Knowledge units of a sentence: its words, phrases and entities (ERNIE 1.0, Sun et al. 2019, section 3.2), and
how they line up with the tokenizer's pieces.

A sentence's units are three nested levels over its words. Words are the basic units: runs of letters and digits,
each punctuation mark and each CJK character alone (the split BERT's pre-tokenizer makes), or the words of a
segmenter (jieba, for Chinese), or the space-separated items of pre-segmented text. Phrases and entities are
spans of whole words; a phrase that overlaps an entity is dropped unless it holds the whole entity and more (an
entity is masked whole only from the entity stage on), so the levels stay nested.

Each token then gets a *join code*: the lowest level at which it belongs to the same unit as the token before it,
``WORD`` (0, a later piece of the same word), ``PHRASE`` (1), ``ENTITY`` (2), or ``NONE`` (3, it starts a unit at
every level). Masking at stage s groups a row's tokens into runs linked by codes <= s (``objectives/masking.py``),
so one int8 per token carries all three segmentations and the same cached corpus serves every stage.

Pre-segmented text (ERNIE's own input, ``objective.presegmented=true``): words separated by spaces, a phrase
written ``[[w1 w2 ...]]``, an entity ``{{w1 w2 ...}}``; markers may nest (``[[the {{New York}} Times]]``) but not
cross, and text cannot hold a literal ``[[``, ``]]``, ``{{`` or ``}}``. The markers are removed before tokenizing.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from plm_toolkit.core.errors import ConfigError, DataError
from plm_toolkit.data.sources.chinese import CJK_CLASS
from plm_toolkit.data.sources.user_files import iter_lines

WORD, PHRASE, ENTITY, NONE = 0, 1, 2, 3
LEVELS = ("word", "phrase", "entity")

# BERT's CJK ranges (tokenization.py, _is_chinese_char): each such character is a word of its own.
_CJK = CJK_CLASS
_WORDS = re.compile(rf"[^\W_{_CJK}]+|[{_CJK}]|[^\s\w]|_")
_MARKERS = {"[[": ("]]", "phrase"), "{{": ("}}", "entity")}
_MARKUP = re.compile(r"\[\[|\]\]|\{\{|\}\}")


@dataclass
class SentenceUnits:
    """One sentence's units: character spans of its words, and phrase / entity spans over word indices
    (first word, one past the last)."""

    text: str
    words: list[tuple[int, int]]
    phrases: list[tuple[int, int]] = field(default_factory=list)
    entities: list[tuple[int, int]] = field(default_factory=list)

    def word_texts(self) -> list[str]:
        return [self.text[s:e] for s, e in self.words]

    def add(self, level: str, spans: Iterable[tuple[int, int]]) -> None:
        """Add phrase or entity spans that do not overlap one already there (the first source found wins)."""
        kept = self.phrases if level == "phrase" else self.entities
        for span in spans:
            if not any(span[0] < e and s < span[1] for s, e in kept):
                kept.append(span)
        kept.sort()

    def resolve(self) -> None:
        """Drop the phrases that overlap an entity, unless they hold the whole entity and more: an entity is
        masked whole only from the entity stage on, and the levels nest."""
        self.phrases = [p for p in self.phrases if all(_apart_or_around(p, e) for e in self.entities)]

    def word_links(self) -> list[int]:
        """link[i]: the level at which word i joins word i - 1 (NONE for the first word)."""
        link = [NONE] * len(self.words)
        for level, spans in ((ENTITY, self.entities), (PHRASE, self.phrases)):
            for s, e in spans:
                for i in range(s + 1, e):
                    link[i] = min(link[i], level)
        return link

    def token_codes(self, offsets: Sequence[tuple[int, int]]) -> list[int]:
        """The join code of every token, given its character offsets in ``text``.

        A token belongs to the word its first character falls in (or the next word, for a token that starts in
        the space before it); a token spanning several words joins them at the highest level between them. Where
        the pieces and the words disagree (a piece reaches over a word's boundary), the tokens of the words it
        touches do not join at the word level: each is masked alone (whole-word masking falls back to tokens).
        """
        ends = [e for _, e in self.words]
        links = self.word_links()
        split = self._split_words(offsets)
        codes: list[int] = []
        previous = None
        for start, _ in offsets:
            word = min(bisect.bisect_right(ends, start), len(self.words) - 1)
            if previous is None or word < previous:
                codes.append(NONE)
            elif word == previous:
                # The pieces of a word the tokenizer cut elsewhere are units of their own (up to its phrase).
                codes.append(self._level_around(word) if word in split else WORD)
            else:
                codes.append(max(links[previous + 1 : word + 1]))
            previous = word
        return codes

    def _split_words(self, offsets: Sequence[tuple[int, int]]) -> set[int]:
        """The words whose pieces disagree with them: a piece (its spaces aside) reaches over a word's boundary."""
        ends = [e for _, e in self.words]
        split: set[int] = set()
        for start, end in offsets:
            piece = self.text[start:end]
            start, end = start + len(piece) - len(piece.lstrip()), end - len(piece) + len(piece.rstrip())
            first = last = bisect.bisect_right(ends, start)  # the first word that ends after the piece starts
            while last < len(self.words) and self.words[last][0] < end:
                last += 1
            if last - first > 1:
                split.update(range(first, last))
        return split

    def _level_around(self, word: int) -> int:
        """The lowest level of a phrase or entity that holds word ``word`` (NONE without one)."""
        levels = [level for level, spans in ((ENTITY, self.entities), (PHRASE, self.phrases)) for s, e in spans
                  if s <= word < e]  # fmt: skip
        return min(levels, default=NONE)


def _apart_or_around(phrase: tuple[int, int], entity: tuple[int, int]) -> bool:
    """Whether a phrase is apart from an entity or holds it and more."""
    apart = phrase[1] <= entity[0] or entity[1] <= phrase[0]
    return apart or (phrase[0] <= entity[0] and entity[1] <= phrase[1] and phrase != entity)


# --- words ------------------------------------------------------------------------------------------------


def split_words(text: str, segmenter: str = "regex") -> list[tuple[int, int]]:
    """Character spans of the words of ``text``: BERT-style (regex) or jieba's (for Chinese)."""
    if segmenter == "jieba":
        return [(s, e) for word, s, e in jieba_module().tokenize(text) if word.strip()]
    return [m.span() for m in _WORDS.finditer(text)]


def jieba_module():
    """jieba, imported on first use (an optional extra: pip install 'plm_toolkit[zh]')."""
    try:
        import jieba
    except ImportError:
        raise ConfigError(
            "objective.word_segmenter=jieba needs the jieba package: pip install 'plm_toolkit[zh]' (or jieba)"
        ) from None
    import logging

    jieba.setLogLevel(logging.WARNING)  # its dictionary loading otherwise prints to stderr on every start
    return jieba


def parse_presegmented(line: str, source: str) -> tuple[str, list[tuple[int, int]], dict[str, list]]:
    """(plain text, word spans, {"phrase": spans, "entity": spans}) of one pre-segmented line; spans over words.

    Raises DataError naming ``source`` and quoting the line when a marker is unbalanced or markers cross.
    """
    plain: list[str] = []
    words: list[tuple[int, int]] = []
    spans: dict[str, list] = {"phrase": [], "entity": []}
    open_units: list[tuple[str, int]] = []  # (closing marker, first word index)
    length = 0
    pieces = _MARKUP.split(line)
    markers = _MARKUP.findall(line)
    for i, piece in enumerate(pieces):
        for m in re.finditer(r"\S+", piece):
            words.append((length + m.start(), length + m.end()))
        plain.append(piece)
        length += len(piece)
        if i == len(markers):
            break
        marker = markers[i]
        if marker in _MARKERS:
            open_units.append((marker, len(words)))
            continue
        if not open_units or _MARKERS[open_units[-1][0]][0] != marker:
            raise DataError(f"{source}: unbalanced or crossing {marker!r} in pre-segmented text {line[:80]!r}")
        opening, first = open_units.pop()
        if len(words) > first:
            spans[_MARKERS[opening][1]].append((first, len(words)))
    if open_units:
        raise DataError(f"{source}: {open_units[-1][0]!r} is never closed in pre-segmented text {line[:80]!r}")
    return "".join(plain), words, spans


# --- lexicons ---------------------------------------------------------------------------------------------


class Lexicon:
    """Entries of a phrase lexicon or an entity gazetteer, each a sequence of words, matched over a sentence's
    words left to right, longest entry first, without overlaps."""

    def __init__(self, entries: Iterable[Sequence[str]], ignore_case: bool = False):
        self.ignore_case = ignore_case
        self.entries = {self._key(e) for e in entries if e}
        self.longest = max((len(e) for e in self.entries), default=0)

    def _key(self, words: Sequence[str]) -> tuple[str, ...]:
        return tuple(w.casefold() for w in words) if self.ignore_case else tuple(words)

    def __len__(self) -> int:
        return len(self.entries)

    def match(self, words: Sequence[str]) -> list[tuple[int, int]]:
        key = self._key(words)
        found: list[tuple[int, int]] = []
        i = 0
        while i < len(key):
            for n in range(min(self.longest, len(key) - i), 0, -1):
                if key[i : i + n] in self.entries:
                    found.append((i, i + n))
                    i += n
                    break
            else:
                i += 1
        return found


def lexicon_path(path: str | Path, key: str) -> Path:
    """The lexicon file ``key`` names; DataError when there is none."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise DataError(f"{key}={path}: no such file; expected a UTF-8 text file with one entry per line")
    return path


def read_lexicon(path: str | Path, key: str, segmenter: str, ignore_case: bool, min_words: int) -> Lexicon:
    """A lexicon file: UTF-8, one entry per line (text before a tab; blank lines skipped), split into words as the
    corpus is. Entries of fewer than ``min_words`` words are left out (a single word is already a unit)."""
    path = lexicon_path(path, key)
    entries = []
    for _, line in iter_lines(path, key):
        entry = line.split("\t", 1)[0].strip()
        if entry:
            entries.append([entry[s:e] for s, e in split_words(entry, segmenter)])
    lexicon = Lexicon([e for e in entries if len(e) >= min_words], ignore_case)
    if not lexicon:
        raise DataError(
            f"{key}={path}: no entries of {min_words} word(s) or more; expected one entry per line"
            + (" (a phrase needs two words or more)" if min_words > 1 else "")
        )
    return lexicon
