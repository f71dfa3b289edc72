"""Character ids of words as ELMo's biLM reads them (bilm-tf's ``UnicodeCharsVocabulary``, Peters et al. 2018).

A word becomes ``max_characters`` ids: begin-of-word, the word's UTF-8 bytes (0-255), end-of-word, then padding.
Words longer than ``max_characters - 2`` bytes are cut to that many bytes (a multi-byte character may be split, as
bilm-tf does: it slices the encoded bytes). The sentence markers ``<S>`` and ``</S>`` are the single characters 256
and 257 between begin- and end-of-word. Every id is then shifted by one, so that 0 is free for masking: a padding
token is all zeros.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

BOS_TOKEN, EOS_TOKEN = "<S>", "</S>"
# bilm-tf's character ids before the +1 shift.
BOS_CHAR, EOS_CHAR, BOW_CHAR, EOW_CHAR, PAD_CHAR = 256, 257, 258, 259, 260
# Ids after the shift run 0 (masking) .. 261; an embedding table therefore has 262 rows.
NUM_CHARACTER_IDS = 262
MAX_CHARACTERS = 50


def _marker(char: int, max_characters: int) -> list[int]:
    ids = [PAD_CHAR + 1] * max_characters
    ids[:3] = [BOW_CHAR + 1, char + 1, EOW_CHAR + 1]
    return ids


def word_character_ids(word: str, max_characters: int = MAX_CHARACTERS) -> list[int]:
    """The ``max_characters`` shifted character ids of one word (``<S>`` and ``</S>`` are the sentence markers)."""
    if word == BOS_TOKEN:
        return _marker(BOS_CHAR, max_characters)
    if word == EOS_TOKEN:
        return _marker(EOS_CHAR, max_characters)
    encoded = word.encode("utf-8", "ignore")[: max_characters - 2]
    ids = [PAD_CHAR + 1] * max_characters
    ids[0] = BOW_CHAR + 1
    ids[1 : len(encoded) + 1] = [b + 1 for b in encoded]
    ids[len(encoded) + 1] = EOW_CHAR + 1
    return ids


def character_ids(sentences: Sequence[Sequence[str]], max_characters: int = MAX_CHARACTERS) -> torch.Tensor:
    """(B, T, max_characters) long ids of a batch of tokenized sentences, T the longest; padding tokens are 0."""
    width = max((len(s) for s in sentences), default=0)
    out = torch.zeros((len(sentences), width, max_characters), dtype=torch.long)
    for row, sentence in enumerate(sentences):
        if sentence:
            out[row, : len(sentence)] = torch.tensor([word_character_ids(w, max_characters) for w in sentence])
    return out


def character_table(words: Sequence[str], max_characters: int = MAX_CHARACTERS) -> torch.Tensor:
    """(len(words), max_characters) ids of a vocabulary, for looking words up by id: ``table[ids]``."""
    if not words:
        return torch.zeros((0, max_characters), dtype=torch.int16)
    return torch.tensor([word_character_ids(w, max_characters) for w in words], dtype=torch.int16)


def token_strings(encoding, texts: Sequence[str] = (), words: Sequence[str] | None = None) -> list[str]:
    """The text of every token of a ``tokenizers`` Encoding: its span of the source (``texts[sequence]`` for raw
    text, ``words[word]`` for pretokenized input), or the token itself for special tokens. A word-level vocabulary
    maps unknown words to <UNK>; this keeps their spelling for a character-reading backbone."""
    out = []
    for token, sequence, word, (start, end) in zip(
        encoding.tokens, encoding.sequence_ids, encoding.word_ids, encoding.offsets, strict=True
    ):
        if sequence is None:
            out.append(token)
        elif words is not None:
            out.append(words[word][start:end])
        else:
            out.append(texts[sequence][start:end])
    return out


def template_character_ids(pieces, id_to_token, a: Sequence[str], b: Sequence[str] = (), max_characters: int = 50):
    """Character ids of a sequence assembled by a task ``Template`` from the token strings of its segments (the
    template's special tokens spelled by ``id_to_token``), position for position with ``Template.assemble``."""
    strings: list[str] = []
    for piece, _ in pieces:
        strings += list(a) if piece == "A" else list(b) if piece == "B" else [id_to_token(piece)]
    return [word_character_ids(s, max_characters) for s in strings]
