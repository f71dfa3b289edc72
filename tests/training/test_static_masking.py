"""BERT's static masking (dupe_factor N) against RoBERTa's dynamic masking, through the real MLM transform."""

import torch

from plm_toolkit.data.batching.loader import BatchLayout, MicroBatches
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.objectives.masking import IGNORE_INDEX, MaskingTransform

VOCAB = Vocab(50, 0, 1, 2, 3, 4)
N = 6  # examples; one micro-batch is one epoch


def collate(rows):
    ids = torch.tensor([[2, *r["body"], 3] for r in rows])
    return {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "token_type_ids": torch.zeros_like(ids),
        "special_tokens_mask": (ids == 2) | (ids == 3),
        "x": torch.tensor([r["x"] for r in rows]),
    }


def masks_by_epoch(static_copies: int, epochs: int = 6) -> list[dict[int, tuple]]:
    examples = [{"x": i, "body": list(range(5 + i, 35 + i))} for i in range(N)]
    transform = MaskingTransform(VOCAB.size, VOCAB.mask_id, VOCAB.special_ids, mask_prob=0.2)
    batches = MicroBatches(examples, BatchLayout(N, 1), 0, collate, transform, seed=11, static_copies=static_copies)
    out = []
    for epoch in range(epochs):
        batch = batches[epoch]
        chosen = batch["mlm_labels"] != IGNORE_INDEX
        out.append({int(x): tuple(chosen[row].nonzero().squeeze(1).tolist()) for row, x in enumerate(batch["x"])})
    return out


def test_static_masking_cycles_through_dupe_factor_masks():
    epochs = masks_by_epoch(static_copies=2)
    assert epochs[0] == epochs[2] == epochs[4] and epochs[1] == epochs[3] == epochs[5]
    assert all(epochs[0][i] != epochs[1][i] for i in range(N))  # two different masks per sequence


def test_dynamic_masking_draws_a_new_mask_every_epoch():
    epochs = masks_by_epoch(static_copies=0)
    for i in range(N):
        assert len({epoch[i] for epoch in epochs}) == len(epochs)
