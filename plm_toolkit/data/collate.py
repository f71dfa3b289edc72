"""Batching: pad examples to the longest in the batch and add the masks objectives need."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from plm_toolkit.data.vocab import Vocab


def collate(examples: Sequence[dict[str, Any]], vocab: Vocab) -> dict[str, torch.Tensor]:
    """Stack examples (`input_ids`, optional `token_type_ids` and `next_sentence_label`) into a batch.

    Returns, with B examples and T the longest length:
      input_ids            (B, T) long, right-padded with vocab.padding_id
      token_type_ids       (B, T) long, 0 where an example has none and on padding
      attention_mask       (B, T) long, 1 on real tokens, 0 on padding
      special_tokens_mask  (B, T) bool, True on padding and on the tokens with a structural role ([CLS], [SEP],
                           [MASK], <s>, </s>, <|endoftext|>, sentinels): the positions a masking objective must
                           never select, as in BERT, whose create_pretraining_data.py leaves [CLS] and [SEP] out
                           of the candidates. [UNK] stays False: the reference treats it as an ordinary token
                           that can be masked and predicted.
      next_sentence_label  (B,) long, when the examples have one
    """
    lengths = [len(e["input_ids"]) for e in examples]
    batch_size, width = len(examples), max(lengths)
    input_ids = torch.full((batch_size, width), vocab.padding_id, dtype=torch.long)
    token_type_ids = torch.zeros((batch_size, width), dtype=torch.long)
    attention_mask = torch.zeros((batch_size, width), dtype=torch.long)
    for row, (example, length) in enumerate(zip(examples, lengths, strict=True)):
        input_ids[row, :length] = torch.as_tensor(example["input_ids"], dtype=torch.long)
        if example.get("token_type_ids") is not None:
            token_type_ids[row, :length] = torch.as_tensor(example["token_type_ids"], dtype=torch.long)
        attention_mask[row, :length] = 1
    roles = (vocab.cls_id, vocab.sep_id, vocab.mask_id, vocab.bos_id, vocab.eos_id, *vocab.sentinel_ids)
    special = torch.tensor([i for i in roles if i is not None], dtype=torch.long)
    special_tokens_mask = torch.isin(input_ids, special) | (attention_mask == 0)
    batch = {
        "input_ids": input_ids,
        "token_type_ids": token_type_ids,
        "attention_mask": attention_mask,
        "special_tokens_mask": special_tokens_mask,
    }
    if "next_sentence_label" in examples[0]:
        batch["next_sentence_label"] = torch.tensor([int(e["next_sentence_label"]) for e in examples], dtype=torch.long)
    return batch


class Collator:
    """`collate` bound to a vocabulary: a picklable `collate_fn` for DataLoader worker processes."""

    def __init__(self, vocab: Vocab) -> None:
        self.vocab = vocab

    def __call__(self, examples: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        return collate(examples, self.vocab)

    def __repr__(self) -> str:
        return f"Collator({self.vocab})"
