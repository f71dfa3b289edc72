"""The special-token roles every objective, packer and collator needs, read once from the tokenizer.

Every role is optional: BERT's WordPiece has pad / unk / cls / sep / mask, GPT-2's byte-level BPE only an
end-of-text token (its bos, eos and unk at once), T5's SentencePiece pad / eos / unk and sentinels. Code that needs a
role asks for it with ``require``, which names the missing token and who needs it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from plm_toolkit.core.errors import DataError

# Role -> the token strings that fill it in the vocabularies we read, in order of preference.
ROLE_TOKENS: dict[str, tuple[str, ...]] = {
    "pad_id": ("[PAD]", "<pad>"),
    "unk_id": ("[UNK]", "<UNK>", "<unk>", "<|endoftext|>"),
    "cls_id": ("[CLS]", "<cls>", "<s>"),
    "sep_id": ("[SEP]", "<sep>", "</s>"),
    "mask_id": ("[MASK]", "<mask>"),
    "bos_id": ("<s>", "<|endoftext|>", "<S>"),
    "eos_id": ("</s>", "<|endoftext|>", "</S>"),
}


@dataclass(frozen=True)
class Vocab:
    size: int
    pad_id: int | None = None
    unk_id: int | None = None
    # The summary token (BERT's [CLS]) and the segment separator ([SEP]).
    cls_id: int | None = None
    sep_id: int | None = None
    mask_id: int | None = None
    # Start and end of a text (RoBERTa's <s> / </s>, GPT-2's <|endoftext|> for both).
    bos_id: int | None = None
    eos_id: int | None = None
    # T5's <extra_id_0>, <extra_id_1>, ...: span-corruption sentinels, in order.
    sentinel_ids: tuple[int, ...] = ()
    # Every token's string, by id: how a character-reading objective (ELMo's bilm) spells the words it reads.
    tokens: tuple[str, ...] = field(default=(), repr=False, compare=False)
    # Ids of the pieces that continue a word rather than start one (WordPiece "##x", byte-level BPE pieces without
    # a leading space): what whole-word and n-gram masking group by. Empty: every piece is a word.
    continuation_ids: frozenset[int] = field(default=frozenset(), repr=False, compare=False)

    @property
    def special_ids(self) -> tuple[int, ...]:
        """Every id with a role (no duplicates), sentinels included: never masked, never a random replacement."""
        roles = (self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id, self.bos_id, self.eos_id)
        return tuple(dict.fromkeys(i for i in (*roles, *self.sentinel_ids) if i is not None))

    @property
    def document_separator(self) -> int:
        """The token between documents of a packed stream: end-of-text where the vocabulary has one (GPT-2), else
        the segment separator (BERT's [SEP], RoBERTa's </s>)."""
        separator = self.eos_id if self.eos_id is not None else self.sep_id
        if separator is None:
            raise DataError("the tokenizer has neither an end-of-text nor a separator token to join documents with")
        return separator

    @property
    def padding_id(self) -> int:
        """The id that fills padding: the pad token, else end-of-text (GPT-2 has no pad token; padding is masked)."""
        for candidate in (self.pad_id, self.eos_id, self.unk_id):
            if candidate is not None:
                return candidate
        return 0

    def require(self, role: str, needed_by: str) -> int:
        """The id of ``role`` ("mask_id", ...), or DataError naming the tokens that would fill it."""
        value = getattr(self, role)
        if value is None:
            names = " or ".join(ROLE_TOKENS.get(role, (role,)))
            raise DataError(f"the tokenizer has no {names} token; {needed_by} needs one")
        return value
