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


# Label of padding positions: cross-entropy's default ignore_index.
IGNORE_INDEX = -100


class Seq2SeqCollator:
    """Sentence pairs -> an encoder-decoder batch. Rows hold ``source_ids`` and ``target_ids`` (no special tokens)
    and an ``index``; a row may also be a list of rows (a token batch, ``data/token_batches.py``), flattened here.

    Returns, with B rows, S the longest source and T the longest target (each with its end token):
      input_ids       (B, S) the source followed by eos, right-padded with pad
      attention_mask  (B, S) 1 on source tokens, 0 on padding
      labels          (B, T) the target followed by eos, IGNORE_INDEX on padding; the objective shifts it right
                      behind the model's decoder start token to feed the decoder (teacher forcing)
      index           (B,) row numbers, to match decoded output with references
    """

    def __init__(self, pad_id: int, eos_id: int):
        self.pad_id, self.eos_id = pad_id, eos_id

    def __call__(self, rows: Sequence[Any]) -> dict[str, torch.Tensor]:
        rows = [r for item in rows for r in (item if isinstance(item, list) else [item])]
        sources = [[*r["source_ids"], self.eos_id] for r in rows]
        targets = [[*r["target_ids"], self.eos_id] for r in rows]
        input_ids = _pad(sources, self.pad_id)  # (B, S)
        return {
            "input_ids": input_ids,
            "attention_mask": (_pad([[1] * len(s) for s in sources], 0)),  # (B, S)
            "labels": _pad(targets, IGNORE_INDEX),  # (B, T)
            "index": torch.tensor([int(r["index"]) for r in rows], dtype=torch.long),  # (B,)
        }

    def __repr__(self) -> str:
        return f"Seq2SeqCollator(pad_id={self.pad_id}, eos_id={self.eos_id})"


def _pad(sequences: Sequence[Sequence[int]], fill: int) -> torch.Tensor:
    width = max(len(s) for s in sequences)
    out = torch.full((len(sequences), width), fill, dtype=torch.long)
    for row, sequence in enumerate(sequences):
        out[row, : len(sequence)] = torch.as_tensor(sequence, dtype=torch.long)
    return out
