"""BERT's dynamic masking: rates, exclusions, labels and seed-determinism independent of batching and padding."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import pytest
import torch

from plm_toolkit.core.errors import ConfigError
from plm_toolkit.objectives.masking import IGNORE_INDEX, MaskingTransform, check_masking_config

# An odd-sized vocabulary with the special ids scattered, so that the non-special draw must step over each.
VOCAB_SIZE = 99
PAD, UNK, CLS, SEP, MASK = 0, 7, 40, 41, 98
SPECIALS = (PAD, UNK, CLS, SEP, MASK)


def make_batch(lengths: list[int], seq_len: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Rows of [CLS] a... [SEP] b... [SEP] followed by padding, like the sentence-pair collator's output."""
    rows = len(lengths)
    non_special = torch.tensor([i for i in range(VOCAB_SIZE) if i not in SPECIALS])
    input_ids = torch.full((rows, seq_len), PAD)
    special = torch.ones(rows, seq_len, dtype=torch.bool)
    attention = torch.zeros(rows, seq_len, dtype=torch.long)
    for row, length in enumerate(lengths):
        body = non_special[torch.randint(len(non_special), (length,), generator=generator)]
        input_ids[row, :length] = body
        special[row, :length] = False
        split = 1 + length // 2
        input_ids[row, 0], input_ids[row, split], input_ids[row, length - 1] = CLS, SEP, SEP
        special[row, [0, split, length - 1]] = True
        attention[row, :length] = 1
    return {
        "input_ids": input_ids,
        "attention_mask": attention,
        "token_type_ids": torch.zeros_like(input_ids),
        "special_tokens_mask": special,
    }


def transform(**rates) -> MaskingTransform:
    return MaskingTransform(vocab_size=VOCAB_SIZE, mask_id=MASK, special_ids=SPECIALS, **rates)


@pytest.fixture(scope="module")
def large_sample():
    """2,000 rows padded to 128, of lengths 8..128 (the masking statistics below are read off this sample)."""
    generator = torch.Generator().manual_seed(7)
    lengths = torch.randint(8, 129, (2000,), generator=generator).tolist()
    return make_batch(lengths, 128, generator)


def masking_stats(batch, out) -> dict[str, float]:
    maskable = batch["attention_mask"].bool() & ~batch["special_tokens_mask"]
    chosen = out["mlm_labels"] != IGNORE_INDEX
    new_ids = out["input_ids"]
    masked = chosen & (new_ids == MASK)
    unchanged = chosen & (new_ids == batch["input_ids"])
    # Random draws may hit the original id by chance (1 in 94 here); they count as unchanged, as in BERT.
    replaced = chosen & ~masked & ~unchanged
    n = chosen.sum().item()
    return {
        "chosen": n / maskable.sum().item(),
        "mask": masked.sum().item() / n,
        "random": replaced.sum().item() / n,
        "unchanged": unchanged.sum().item() / n,
    }


def test_default_rates_on_large_sample(large_sample):
    out = transform()(large_sample, range(2000))
    stats = masking_stats(large_sample, out)
    # Exact count per row: only rounding separates the share from 0.15.
    assert stats["chosen"] == pytest.approx(0.15, abs=0.003)
    # ~19,000 targets: three standard errors of a 0.8 / 0.1 share are below 0.01.
    assert stats["mask"] == pytest.approx(0.8, abs=0.01)
    assert stats["random"] == pytest.approx(0.1 * 93 / 94, abs=0.008)
    assert stats["unchanged"] == pytest.approx(0.1 + 0.1 / 94, abs=0.008)


def test_configured_rates_are_respected(large_sample):
    out = transform(mask_prob=0.3, mask_token_prob=0.5, random_token_prob=0.25)(large_sample, range(2000))
    stats = masking_stats(large_sample, out)
    assert stats["chosen"] == pytest.approx(0.3, abs=0.003)
    assert stats["mask"] == pytest.approx(0.5, abs=0.01)
    assert stats["random"] == pytest.approx(0.25 * 93 / 94, abs=0.01)


def test_exact_count_per_row_with_cap(large_sample):
    batch = {key: value[:200] for key, value in large_sample.items()}
    maskable = (batch["attention_mask"].bool() & ~batch["special_tokens_mask"]).sum(dim=1)
    for cap in (None, 5):
        out = transform(max_predictions_per_seq=cap)(batch, range(200))
        counts = (out["mlm_labels"] != IGNORE_INDEX).sum(dim=1)
        for n, count in zip(maskable.tolist(), counts.tolist(), strict=True):
            expected = max(1, round(n * 0.15))
            assert count == (expected if cap is None else min(expected, cap))


def test_specials_and_padding_never_chosen_and_labels_hold_originals(large_sample):
    out = transform()(large_sample, range(2000))
    chosen = out["mlm_labels"] != IGNORE_INDEX
    assert not (chosen & large_sample["special_tokens_mask"]).any()
    assert not (chosen & ~large_sample["attention_mask"].bool()).any()
    assert torch.equal(out["mlm_labels"][chosen], large_sample["input_ids"][chosen])
    # Positions that are not targets keep their ids; the other batch keys pass through untouched.
    assert torch.equal(out["input_ids"][~chosen], large_sample["input_ids"][~chosen])
    assert out["attention_mask"] is large_sample["attention_mask"]
    # The input batch is not modified in place.
    assert not (large_sample["input_ids"] == MASK).any()


def test_random_replacements_cover_all_non_special_ids_and_no_special(large_sample):
    out = transform(mask_token_prob=0.0, random_token_prob=1.0)(large_sample, range(2000))
    chosen = out["mlm_labels"] != IGNORE_INDEX
    drawn = set(out["input_ids"][chosen].tolist())
    assert drawn == set(range(VOCAB_SIZE)) - set(SPECIALS)


@pytest.mark.parametrize("specials", [(0, 1, 2, 3, 4), (7, 3, 96, 50), (5, 500)], ids=["leading", "scattered", "past"])
def test_a_replacement_draw_maps_onto_the_non_special_ids_in_order(specials):
    """Draw r in [0, V - k) is the r-th non-special id: the mapping that stepping over each special id in ascending
    order gives (the masking's earlier code), so seeded runs keep their replacements."""
    masking = MaskingTransform(97, mask_id=4, special_ids=specials)
    stepped = torch.arange(97 - len(set(specials)))
    for special in sorted(set(specials)):
        stepped += (stepped >= special).long()
    generator = torch.Generator().manual_seed(0)
    drawn = masking._random_tokens(5000, generator)
    expected = stepped[torch.randint(len(stepped), (5000,), generator=torch.Generator().manual_seed(0))]
    assert torch.equal(drawn, expected)
    assert set(drawn.tolist()) == set(stepped.tolist()) and not set(drawn.tolist()) & set(specials)
    assert pickle.loads(pickle.dumps(masking))._random_tokens(3, torch.Generator().manual_seed(1)).shape == (3,)


def test_same_seed_same_row_whatever_the_grouping_and_padding():
    generator = torch.Generator().manual_seed(3)
    lengths = [12, 60, 33, 90, 9]
    together = make_batch(lengths, 96, generator)
    seeds = [11, 22, 33, 44, 55]
    masked_together = transform()(together, seeds)
    for row, (length, seed) in enumerate(zip(lengths, seeds, strict=True)):
        # The same row alone, padded to a different length.
        alone = {key: value[row : row + 1, :length] for key, value in together.items()}
        alone = {
            key: torch.cat([value, torch.zeros(1, 7, dtype=value.dtype) + (key == "special_tokens_mask")], dim=1)
            for key, value in alone.items()
        }
        masked_alone = transform()(alone, [seed])
        for key in ("input_ids", "mlm_labels"):
            assert torch.equal(masked_alone[key][0, :length], masked_together[key][row, :length])
        assert (masked_alone["mlm_labels"][0, length:] == IGNORE_INDEX).all()


def test_different_seeds_differ():
    batch = make_batch([100] * 4, 100, torch.Generator().manual_seed(5))
    batch = {key: value[:1].expand(4, -1).clone() for key, value in batch.items()}
    out = transform()(batch, [1, 2, 3, 4])
    labels = out["mlm_labels"]
    assert all(not torch.equal(labels[0], labels[row]) for row in range(1, 4))
    again = transform()(batch, [1, 2, 3, 4])
    assert torch.equal(again["mlm_labels"], labels) and torch.equal(again["input_ids"], out["input_ids"])


def test_row_without_maskable_tokens_gets_no_target():
    batch = make_batch([3, 20], 20, torch.Generator().manual_seed(0))
    batch["special_tokens_mask"][0, :3] = True
    out = transform()(batch, [0, 1])
    assert (out["mlm_labels"][0] == IGNORE_INDEX).all()
    # 17 maskable tokens: round(17 * 0.15) = 3 targets.
    assert (out["mlm_labels"][1] != IGNORE_INDEX).sum() == 3


def test_transform_pickles():
    restored = pickle.loads(pickle.dumps(transform(mask_prob=0.2)))
    assert restored.mask_prob == 0.2 and restored.special_ids == tuple(sorted(SPECIALS))


@pytest.mark.parametrize(
    ("rates", "key"),
    [
        ({"mask_prob": 1.5}, "objective.mask_prob"),
        ({"mask_prob": -0.1}, "objective.mask_prob"),
        ({"mask_token_prob": 1.2}, "objective.mask_token_prob"),
        ({"random_token_prob": -0.5}, "objective.random_token_prob"),
        ({"mask_token_prob": 0.8, "random_token_prob": 0.3}, "objective.random_token_prob"),
        ({"max_predictions_per_seq": 0}, "objective.max_predictions_per_seq"),
    ],
)
def test_bad_rates_raise_config_error_naming_the_key(rates, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        transform(**rates)
    config = SimpleNamespace(
        **{"mask_prob": 0.15, "mask_token_prob": 0.8, "random_token_prob": 0.1, "max_predictions_per_seq": None} | rates
    )
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        check_masking_config(config)


def test_the_masking_of_seeded_rows_is_pinned():
    """Seeded rows mask the same positions the same way as the code that wrote this test's numbers (before the
    writes were batched and the replacement ids became one index): resumed runs and the demo's figures depend on
    the stream not moving when the code gets faster."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(6, 50, (3, 12), generator=generator)
    ids[:, 0] = 2
    ids[2, 8:] = 0
    real = ids != 0
    batch = {"input_ids": ids, "attention_mask": real.long(), "special_tokens_mask": (ids == 2) | ~real}
    masking = MaskingTransform(50, 4, (0, 1, 2, 3, 4), mask_prob=0.4, mask_token_prob=0.5, random_token_prob=0.3)
    out = masking(batch, [7, 8, 9])
    assert out["input_ids"].tolist() == [
        [2, 45, 7, 4, 25, 9, 21, 17, 23, 25, 4, 32],
        [2, 33, 36, 4, 22, 4, 16, 27, 8, 9, 9, 20],
        [2, 7, 15, 27, 15, 4, 39, 4, 0, 0, 0, 0],
    ]
    n = -100
    assert out["mlm_labels"].tolist() == [
        [n, 13, n, 42, 25, n, n, n, n, n, 15, n],
        [n, n, n, 34, n, 38, n, n, n, n, 25, 20],
        [n, n, n, n, n, 26, 39, 10, n, n, n, n],
    ]
