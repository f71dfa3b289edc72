"""Where a family's special tokens go around one text or a pair, read off its tokenizer's post-processor.

BERT ``[CLS] A [SEP] B [SEP]``, RoBERTa ``<s> A </s></s> B </s>``, XLNet ``A <sep> B <sep> <cls>``, GPT-2
``A <|endoftext|>``: pretraining packers and fine-tuning tasks wrap their token ids the way the tokenizer would, so
nothing outside the tokenizer assumes BERT's tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tokenizers import Tokenizer


@dataclass
class Template:
    # Each piece: ("A" | "B" | a special token id, token type id).
    pieces: list[tuple[Any, int]]

    @property
    def num_special(self) -> int:
        return sum(1 for piece, _ in self.pieces if piece not in ("A", "B"))

    def assemble(self, a: Sequence[int], b: Sequence[int] = ()) -> tuple[list[int], list[int], dict[str, int]]:
        """(input_ids, token_type_ids, {"A": first position of A, "B": first position of B})."""
        ids: list[int] = []
        types: list[int] = []
        starts: dict[str, int] = {}
        for piece, type_id in self.pieces:
            tokens = a if piece == "A" else b if piece == "B" else [piece]
            if piece in ("A", "B"):
                starts[piece] = len(ids)
            ids.extend(tokens)
            types.extend([type_id] * len(tokens))
        return ids, types, starts


def template_of(tokenizer: Tokenizer, pair: bool) -> Template:
    encoding = tokenizer.encode("a", "b") if pair else tokenizer.encode("a")
    pieces: list[tuple[Any, int]] = []
    for token_id, type_id, sequence in zip(encoding.ids, encoding.type_ids, encoding.sequence_ids, strict=True):
        if sequence is None:
            pieces.append((token_id, type_id))
        elif not pieces or pieces[-1][0] != "AB"[sequence]:
            pieces.append(("AB"[sequence], type_id))
    return Template(pieces)
