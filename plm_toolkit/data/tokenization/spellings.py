"""The spelling of every token a vocabulary cannot name, carried beside its id for a backbone that reads characters.

A word vocabulary maps a word it lacks to <UNK>, and the id is what a softmax predicts. A character-reading
backbone (ELMo's character CNN) must still read the word as written: bilm-tf spells every word it is given
(``UnicodeCharsVocabulary.word_to_char_ids``), in or out of the vocabulary. So the data keeps the ids and, beside an
id column ``<name>_ids``, a column ``<name>_spellings``: the text of each of the row's unk tokens, in order (a token
that is written ``<UNK>`` in the text is spelled so). The lists are sparse: where the vocabulary was trained on
the same text they are all empty, and an example costs nothing more.

Preparing the token store records them (``data/store/token_store.py``); a layout that cuts a stream into windows lists each
window's own (``data/layouts/windows.py``); the collator passes them through as lists of strings and the
objective's batch transform turns them into character ids (``spelled_character_ids``) and drops them, so no
string reaches the device.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from plm_toolkit.data.tokenization.characters import word_character_ids

SUFFIX = "_spellings"


def spellings_key(ids_key: str) -> str:
    """The spellings column of an id column: ``input_ids`` -> ``input_spellings``."""
    return ids_key.removesuffix("_ids") + SUFFIX


def spelled_character_ids(
    table: torch.Tensor,
    ids: torch.Tensor,
    mask: torch.Tensor,
    unk_id: int,
    spellings: Sequence[Sequence[str]] | None,
) -> torch.Tensor:
    """(B, T, C) character ids of the tokens ``ids`` (B, T): ``table[ids]`` (a (V, C) table of the vocabulary's
    spellings), but each real (``mask``) unk token spelled from ``spellings[b]``, the row's unk spellings in order
    (a row may list more: those of tokens past T, such as a window's last target). None: the table alone."""
    chars = table[ids]  # (B, T, C)
    if spellings is None:
        return chars
    unknown = (ids == unk_id) & mask.bool()  # (B, T)
    counts = unknown.sum(dim=1).tolist()
    if not any(counts):
        return chars
    words = []
    for row, count in enumerate(counts):
        if len(spellings[row]) < count:
            raise ValueError(f"row {row} has {count} unk tokens but {len(spellings[row])} spellings")
        words += spellings[row][:count]
    width = table.shape[1]
    # nonzero walks the rows in order and each row left to right: the order the spellings are listed in.
    chars[unknown.nonzero(as_tuple=True)] = torch.tensor([word_character_ids(w, width) for w in words]).to(chars)
    return chars
