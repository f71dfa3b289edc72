"""Documents as written: how a text is cut into documents, and where its sentences start.

``data.document_boundary`` says what a document is in a text file:
- ``blank_line`` (the default): a block of non-blank lines; one or more blank lines (lines of nothing but
  whitespace) separate documents. A document keeps every character of its lines and the line ends between them;
  the blank lines and the line end before them are the separator, which a layout replaces by its own token.
- ``line``: every non-blank line is a document (one document a line, as many corpora ship).
- ``file``: the whole file is one text, blank lines included (nanoGPT's tinyshakespeare).
Line ends are read as Python's text files read them (universal newlines: ``\\r\\n`` and ``\\r`` become ``\\n``).

Running-text layouts tokenize each document whole; the layouts that need sentences (RoBERTa's full sentences) cut
the document's tokens where its sentences start (``sentence_starts`` and ``token_cuts``), so no character is lost.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from plm_toolkit.data.sources.chinese import chinese_sentence_ends

DOCUMENT_BOUNDARIES = ("blank_line", "line", "file")

# --- sentences --------------------------------------------------------------------------------------------

# A candidate boundary: sentence-final punctuation, optional closing quotes/brackets, whitespace, then what can
# start a sentence (an optional opening quote/bracket before a capital letter or a digit).
_BOUNDARY = re.compile(r"[.!?]+[\"'\u201d\u2019)\]]*\s+(?=[\"'\u201c\u2018(\[]?[A-Z0-9])")
# Words whose final period does not end a sentence (compared lower-cased, without the period).
# fmt: off
ABBREVIATIONS = frozenset({
    "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "mt", "ft", "rev", "hon", "pres",  # titles, places
    "gen", "col", "lt", "sgt", "capt", "cmdr", "adm", "gov", "sen", "rep",  # ranks and offices
    "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec",  # months
    "vs", "etc", "no", "nos", "vol", "fig", "figs", "approx", "dept", "est", "inc", "ltd", "co", "corp",
    "ca", "cf", "al", "op",
})
# fmt: on
# A single initial (`J. Smith`) or a dotted abbreviation (`U.S.`, `e.g.`, `i.e.`, `a.m.`).
_DOTTED = re.compile(r"^(?:[A-Za-z]\.)+$")


def split_sentences(text: str) -> list[str]:
    """Split one line of text into sentences with a regular expression (no model, no nltk).

    A sentence ends at `.`, `!` or `?` (possibly repeated and followed by closing quotes or brackets) when
    whitespace and then a capital letter, a digit or an opening quote follows. A period does not end a sentence
    after a common abbreviation (`Mr.`, `Dr.`, `No.`, `etc.`; see ABBREVIATIONS), a single initial (`J.`) or a
    dotted abbreviation (`U.S.`, `e.g.`). The rule errs towards fewer splits: `in the U.S. He` stays one
    sentence. A Chinese sentence ends at 。！？ and their fullwidth kin, with its closing quotes, whatever follows
    (``data/sources/chinese.py``). Sentences keep their punctuation; empty text gives [].
    """
    return [text[start:end] for start, end in sentence_spans(text)]


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence of one line (``split_sentences``), without the whitespace around it."""
    spans = []
    start = 0
    # Chinese sentences end at 。！？ with no space after them (data/sources/chinese.py).
    ends = [(m.end(), m.group().startswith(".") and m.start() + 1) for m in _BOUNDARY.finditer(text)]
    for end, period in sorted(ends + [(end, False) for end in chinese_sentence_ends(text)]):
        if end <= start or (period and _is_abbreviation(text[start:period])):
            continue
        spans += _stripped(text, start, end)
        start = end
    return spans + _stripped(text, start, len(text))


def _stripped(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """[(start, end)] narrowed to the non-whitespace text between them; [] when there is none."""
    piece = text[start:end]
    kept = piece.lstrip()
    if not kept.strip():
        return []
    first = start + len(piece) - len(kept)
    return [(first, first + len(kept.rstrip()))]


def _is_abbreviation(before: str) -> bool:
    """Whether the last word of `before` (which ends with its period) is an abbreviation."""
    words = before.split()
    if not words:
        return False
    word = words[-1].lstrip("\"'(\u201c\u2018[")
    return word[:-1].lower() in ABBREVIATIONS or bool(_DOTTED.match(word))


def document_sentences(text: str) -> list[str]:
    """The sentences of one document, line by line (the sentence layouts: BERT's pairs, ELMo's streams)."""
    return [s for line in text.splitlines() for s in split_sentences(line)]


# --- documents --------------------------------------------------------------------------------------------


# A line end followed by one or more blank lines (lines of whitespace only).
_SEPARATOR = re.compile(r"\n(?:[^\S\n]*\n)+")
# Blank lines at the start of a text.
_LEADING_BLANK = re.compile(r"(?:[^\S\n]*\n)+")


def split_text(text: str, boundary: str = "blank_line") -> list[str]:
    """The documents of ``text`` (newlines already universal), each exactly as written; blank ones are dropped."""
    if boundary == "file":
        return [text] if text.strip() else []
    if boundary == "line":
        return [line for line in text.split("\n") if line.strip()]
    if boundary != "blank_line":
        raise ValueError(f"document boundary must be one of {DOCUMENT_BOUNDARIES}, got {boundary!r}")
    documents = []
    for piece in _SEPARATOR.split(text):
        if not piece.strip():
            continue
        leading = _LEADING_BLANK.match(piece)
        if leading:
            piece = piece[leading.end() :]
        last = piece.rfind("\n")  # the line end of a text's last line (and a blank line after it) is no text
        documents.append(piece[:last] if last >= 0 and not piece[last + 1 :].strip() else piece)
    return documents


def iter_split(texts, boundary: str) -> Iterator[str]:
    """The documents of every text of ``texts``, in order."""
    for text in texts:
        yield from split_text(text or "", boundary)


def sentence_starts(document: str) -> list[int]:
    """The character position where each sentence of ``document`` starts (its first non-blank character), line by
    line as ``document_sentences`` splits them."""
    starts = []
    offset = 0
    for line in document.splitlines(keepends=True):
        starts.extend(offset + start for start, _ in sentence_spans(line))
        offset += len(line)
    return starts


def token_cuts(encoding, starts: list[int], text_length: int) -> list[int]:
    """Token positions where the sentences starting at character positions ``starts`` begin in ``encoding`` (a
    ``tokenizers`` Encoding of the whole document): increasing, without 0 or the token count, so that cutting there
    splits the tokens into non-empty sentences. A token that holds a sentence's first character starts it; leading
    and trailing whitespace go with the sentence they follow (or the first)."""
    count = len(encoding.ids)
    cuts: list[int] = []
    for start in starts:
        token = None
        position = start
        while token is None and position < text_length:  # a character the normalizer removed belongs to no token
            token = encoding.char_to_token(position)
            position += 1
        if token is None:
            break
        if 0 < token < count and (not cuts or token > cuts[-1]):
            cuts.append(token)
    return cuts
