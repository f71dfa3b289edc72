"""The special-token facts every objective and collator needs, read once from the tokenizer."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Vocab:
    size: int
    pad_id: int
    unk_id: int
    cls_id: int
    sep_id: int
    mask_id: int
    # Ids of the pieces that continue a word rather than start one (WordPiece "##x", byte-level BPE pieces without
    # a leading space): what whole-word and n-gram masking group by. Empty: every piece is a word.
    continuation_ids: frozenset[int] = field(default=frozenset(), repr=False, compare=False)

    @property
    def special_ids(self) -> tuple[int, ...]:
        return (self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id)
