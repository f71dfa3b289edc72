"""Batching: pad examples to the longest in the batch and add the masks objectives need."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from plm_toolkit.data.batching.shapes import Shapes
from plm_toolkit.data.tokenization.spellings import SUFFIX as SPELLINGS
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.data.units.knowledge import NONE as NO_UNIT


def collate(examples: Sequence[dict[str, Any]], vocab: Vocab, shapes: Shapes | None = None) -> dict[str, torch.Tensor]:
    """Stack examples (`input_ids`, optional `token_type_ids` and `next_sentence_label`) into a batch.

    Returns, with B examples and T the longest length (rounded up as ``shapes`` says, data/batching/shapes.py):
      input_ids            (B, T) long, right-padded with vocab.padding_id
      token_type_ids       (B, T) long, 0 where an example has none and on padding
      attention_mask       (B, T) long, 1 on real tokens, 0 on padding
      special_tokens_mask  (B, T) bool, True on padding and on the tokens with a structural role ([CLS], [SEP],
                           [MASK], <s>, </s>, <|endoftext|>, sentinels): the positions a masking objective must
                           never select, as in BERT, whose create_pretraining_data.py leaves [CLS] and [SEP] out
                           of the candidates. [UNK] stays False: the reference treats it as an ordinary token
                           that can be masked and predicted.
      next_sentence_label  (B,) long, when the examples have one
      reverse_ids          (B, T) long, when the examples have one (ELMo's reversed-sentence stream), padded as
                           input_ids
      units                (B, T) int8, knowledge units' join codes, when the examples have them
      <name>_spellings     B lists of strings, as the examples have them (data/tokenization/spellings.py): the
                           spelling of each unk token of <name>_ids; not tensors, so the objective's transform
                           consumes them
    """
    lengths = [len(e["input_ids"]) for e in examples]
    width = (shapes or Shapes()).width(max(lengths))
    real = torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]  # (B, T)
    input_ids = _padded(real, [e["input_ids"] for e in examples], vocab.padding_id, torch.long)
    segments = [e.get("token_type_ids") for e in examples]
    segments = [s if s is not None else np.zeros(n, np.int64) for s, n in zip(segments, lengths, strict=True)]
    token_type_ids = _padded(real, segments, 0, torch.long)
    attention_mask = real.long()
    roles = (vocab.cls_id, vocab.sep_id, vocab.mask_id, vocab.bos_id, vocab.eos_id, *vocab.sentinel_ids)
    special = torch.tensor([i for i in roles if i is not None], dtype=torch.long)
    special_tokens_mask = torch.isin(input_ids, special) | (attention_mask == 0)
    batch = {
        "input_ids": input_ids,
        "token_type_ids": token_type_ids,
        "attention_mask": attention_mask,
        "special_tokens_mask": special_tokens_mask,
    }
    if "reverse_ids" in examples[0]:
        batch["reverse_ids"] = _padded(real, [e["reverse_ids"] for e in examples], vocab.padding_id, torch.long)
    if "units" in examples[0]:
        # Knowledge units' join codes (data/units/knowledge.py); padding starts no unit of its own.
        batch["units"] = _padded(real, [e["units"] for e in examples], NO_UNIT, torch.int8)
    for key in examples[0]:
        if key.endswith(SPELLINGS):
            batch[key] = [list(e[key]) for e in examples]
    if "next_sentence_label" in examples[0]:
        batch["next_sentence_label"] = torch.tensor([int(e["next_sentence_label"]) for e in examples], dtype=torch.long)
    return batch


def _padded(real: torch.Tensor, rows: Sequence, fill: int, dtype: torch.dtype) -> torch.Tensor:
    """(B, T) ``rows`` (lists or arrays of the lengths ``real`` marks) right-padded with ``fill``, in one copy."""
    out = torch.full(real.shape, fill, dtype=dtype)
    out[real] = torch.from_numpy(np.concatenate([np.asarray(r, dtype=np.int64) for r in rows])).to(dtype)
    return out


def target_positions(labels: torch.Tensor, budget: int, ignore_index: int = -100) -> torch.Tensor:
    """(N,) the flat positions (row * T + column) of ``labels != ignore_index`` in order, padded with B * T.

    N is ``budget``, a bound the caller knows for the batch's shape (``MaskingTransform.target_budget``), so that a
    compiled step sees one N per shape. A head that runs only at the targets gathers with it: computed here on the
    CPU, the count needs no device-to-host copy during the training step.
    """
    flat = (labels != ignore_index).flatten()  # (B*T,)
    where = flat.nonzero().squeeze(1)  # (n,)
    if where.numel() > budget:
        raise ValueError(f"{where.numel()} targets exceed the budget of {budget} for a batch of {tuple(labels.shape)}")
    return torch.cat([where, torch.full((budget - where.numel(),), flat.numel(), dtype=torch.long)])  # (N,)


class Collator:
    """`collate` bound to a vocabulary: a picklable `collate_fn` for DataLoader worker processes."""

    def __init__(self, vocab: Vocab) -> None:
        self.vocab = vocab

    def __call__(self, examples: Sequence[dict[str, Any]], shapes: Shapes | None = None) -> dict[str, torch.Tensor]:
        return collate(examples, self.vocab, shapes)

    def __repr__(self) -> str:
        return f"Collator({self.vocab})"


# Label of padding positions: cross-entropy's default ignore_index.
IGNORE_INDEX = -100


class Seq2SeqCollator:
    """Sentence pairs -> an encoder-decoder batch. Rows hold ``source_ids`` and ``target_ids`` (no special tokens)
    and an ``index``; a row may also be a list of rows (a token batch, ``data/layouts/token_batches.py``), flattened
    here.

    Returns, with B rows, S the longest source and T the longest target (each with its end token; both rounded up as
    ``shapes`` says):
      input_ids       (B, S) the source followed by eos, right-padded with pad
      attention_mask  (B, S) 1 on source tokens, 0 on padding
      labels          (B, T) the target followed by eos, IGNORE_INDEX on padding; the objective shifts it right
                      behind the model's decoder start token to feed the decoder (teacher forcing)
      index           (B,) row numbers, to match decoded output with references
    """

    def __init__(self, pad_id: int, eos_id: int):
        self.pad_id, self.eos_id = pad_id, eos_id

    def __call__(self, rows: Sequence[Any], shapes: Shapes | None = None) -> dict[str, torch.Tensor]:
        rows = [r for item in rows for r in (item if isinstance(item, list) else [item])]
        sources = [[*r["source_ids"], self.eos_id] for r in rows]
        targets = [[*r["target_ids"], self.eos_id] for r in rows]
        input_ids = _pad(sources, self.pad_id, shapes)  # (B, S)
        return {
            "input_ids": input_ids,
            "attention_mask": (_pad([[1] * len(s) for s in sources], 0, shapes)),  # (B, S)
            "labels": _pad(targets, IGNORE_INDEX, shapes),  # (B, T)
            "index": torch.tensor([int(r["index"]) for r in rows], dtype=torch.long),  # (B,)
        }

    def __repr__(self) -> str:
        return f"Seq2SeqCollator(pad_id={self.pad_id}, eos_id={self.eos_id})"


def shift_right(labels: torch.Tensor, start_id: int, pad_id: int) -> torch.Tensor:
    """(B, T) labels -> (B, T) decoder inputs: the start token, then the labels but the last; padding for
    IGNORE_INDEX."""
    shifted = labels.new_full(labels.shape, pad_id)
    shifted[:, 0] = start_id
    shifted[:, 1:] = labels[:, :-1]
    return shifted.masked_fill(shifted == IGNORE_INDEX, pad_id)


def _pad(sequences: Sequence[Sequence[int]], fill: int, shapes: Shapes | None = None) -> torch.Tensor:
    width = (shapes or Shapes()).width(max(len(s) for s in sequences))
    out = torch.full((len(sequences), width), fill, dtype=torch.long)
    for row, sequence in enumerate(sequences):
        out[row, : len(sequence)] = torch.as_tensor(sequence, dtype=torch.long)
    return out
