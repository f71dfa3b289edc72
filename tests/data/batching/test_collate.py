"""collate pads a batch's examples: every field in its row, padding where each field wants it, the special-token
mask over the structural roles and the padding."""

import numpy as np
import pytest
import torch

from plm_toolkit.data.batching.collate import collate
from plm_toolkit.data.batching.shapes import Shapes
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.data.units.knowledge import NONE as NO_UNIT

VOCAB = Vocab(size=211, pad_id=7, unk_id=1, cls_id=2, sep_id=3, mask_id=4)


def examples(count: int, seed: int) -> list[dict]:
    """Odd lengths (one empty), lists and arrays, token types on some examples only, units and reversed ids."""
    rng = np.random.default_rng(seed)
    out = []
    for row, n in enumerate(rng.integers(0, 41, count).tolist()):
        ids = rng.integers(0, 211, n)
        example = {"input_ids": ids.tolist() if row % 2 else ids, "next_sentence_label": row % 2}
        example["token_type_ids"] = [row % 2] * n if row % 3 else None
        example["units"] = rng.integers(-3, 3, n).astype(np.int8)
        example["reverse_ids"] = ids[::-1].copy()
        out.append(example)
    out[0]["input_ids"], out[0]["units"], out[0]["reverse_ids"], out[0]["token_type_ids"] = [], [], [], None
    return out


@pytest.mark.parametrize("shapes", [None, Shapes.compiled(64)], ids=["longest", "bucket"])
def test_each_field_sits_in_its_row_and_padding_takes_each_fields_value(shapes):
    rows = examples(13, seed=3)
    batch = collate(rows, VOCAB, shapes)
    longest = max(len(r["input_ids"]) for r in rows)
    width = 64 if shapes else longest
    assert batch["input_ids"].shape == (13, width) and batch["units"].dtype == torch.int8
    for row, example in enumerate(rows):
        n = len(example["input_ids"])
        assert batch["input_ids"][row, :n].tolist() == list(example["input_ids"])
        assert batch["reverse_ids"][row, :n].tolist() == list(example["reverse_ids"])
        assert batch["units"][row, :n].tolist() == list(example["units"])
        assert batch["token_type_ids"][row, :n].tolist() == list(example["token_type_ids"] or [0] * n)
        assert batch["attention_mask"][row].tolist() == [1] * n + [0] * (width - n)
        padding = slice(n, None)
        assert (batch["input_ids"][row, padding] == VOCAB.pad_id).all()
        assert (batch["reverse_ids"][row, padding] == VOCAB.pad_id).all()
        assert (batch["units"][row, padding] == NO_UNIT).all() and (batch["token_type_ids"][row, padding] == 0).all()
        roles = torch.isin(batch["input_ids"][row, :n], torch.tensor([2, 3, 4]))
        assert batch["special_tokens_mask"][row].tolist() == roles.tolist() + [True] * (width - n)
    assert batch["next_sentence_label"].tolist() == [r % 2 for r in range(13)]
