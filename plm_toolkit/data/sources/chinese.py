"""Chinese text: which characters are CJK ideographs (each one a token of its own, as BERT's tokenizer makes them)
and where a Chinese sentence ends.

BERT's ``tokenize_chinese_chars`` (google-research/bert tokenization.py, ``_is_chinese_char``) puts spaces around
every character of the CJK Unified Ideographs blocks and their extensions A to E, and of the two compatibility
blocks, so a WordPiece vocabulary never joins two ideographs into one piece. The ``tokenizers`` library's
``BertNormalizer(handle_chinese_chars=True)`` means to do the same but starts its extension-E range at U+2B920
instead of U+2B820 (tokenizers 0.23: U+2B820..U+2B91F stay glued to their neighbours), so every BERT pipeline
(``data/tokenization/pipelines.py``, ``chinese_split``) follows it with a pre-tokenizer that isolates every character
of BERT's ranges. The blocks Unicode added after BERT (extensions F to I) are left as BERT leaves them.

Sentences (``data/sources/documents.py``): a Chinese sentence ends at 。！？ (and the halfwidth ｡, the double
marks ‼ ⁇ ⁈ ⁉), repeated or mixed, with the closing quotes and brackets that follow it; no space follows in
Chinese text. A halfwidth ! or ? ends a sentence when an ideograph follows (text typed without a Chinese input method).
"""

from __future__ import annotations

import re

# BERT's _is_chinese_char, block by block: (first, last code point, Unicode block).
BERT_CJK_RANGES = (
    (0x4E00, 0x9FFF, "CJK Unified Ideographs"),
    (0x3400, 0x4DBF, "CJK Unified Ideographs Extension A"),
    (0x20000, 0x2A6DF, "CJK Unified Ideographs Extension B"),
    (0x2A700, 0x2B73F, "CJK Unified Ideographs Extension C"),
    (0x2B740, 0x2B81F, "CJK Unified Ideographs Extension D"),
    (0x2B820, 0x2CEAF, "CJK Unified Ideographs Extension E"),
    (0xF900, 0xFAFF, "CJK Compatibility Ideographs"),
    (0x2F800, 0x2FA1F, "CJK Compatibility Ideographs Supplement"),
)
# The same ranges as a regular-expression character class body (for ``[...]``).
CJK_CLASS = "".join(f"{chr(first)}-{chr(last)}" for first, last, _ in BERT_CJK_RANGES)

# Sentence-final marks of Chinese text: ideographic and fullwidth full stop, exclamation and question marks.
SENTENCE_FINAL = "\u3002\uff01\uff1f\uff61\u203c\u2047\u2048\u2049"
# Closing quotes and brackets that stay with the sentence before them: ” ’ 」 』 ） 》 〉 】 〕 〗 ＂ ＇ " ' ) ].
_CLOSING = "\u201d\u2019\u300d\u300f\uff09\u300b\u3009\u3011\u3015\u3017\uff02\uff07\"')\\]"
CHINESE_BOUNDARY = re.compile(rf"[{SENTENCE_FINAL}]+[{_CLOSING}]*\s*|[!?]+[{_CLOSING}]*\s*(?=[{CJK_CLASS}])")


def is_chinese_char(character: str) -> bool:
    """Whether BERT's tokenizer makes ``character`` a word of its own (``_is_chinese_char``)."""
    code = ord(character)
    return any(first <= code <= last for first, last, _ in BERT_CJK_RANGES)


def chinese_sentence_ends(text: str) -> list[int]:
    """Where Chinese sentences of ``text`` end: the index after each boundary's marks, quotes and spaces."""
    return [match.end() for match in CHINESE_BOUNDARY.finditer(text) if match.end() < len(text)]
