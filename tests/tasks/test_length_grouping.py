"""Length-grouped fine-tuning batches (trainer.group_by_length): every example once per epoch, far less padding,
and the same accuracy as shuffled batches within seed-to-seed noise."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from plm_toolkit.commands.finetune import run
from plm_toolkit.data.batching.loader import EpochPermutations, LengthGroupedPermutations

from .conftest import SST2_DEV, SST2_TRAIN


def sst2_lengths() -> list[int]:
    """Word counts of the bundled SST-2 slice, a stand-in for token counts."""
    rows = Path(SST2_TRAIN).read_text().splitlines()[1:]
    return [len(row.split("\t")[0].split()) + 2 for row in rows]


def padded_tokens(order, lengths, batch: int, count: int) -> int:
    indices = [order(p) for p in range(count)]
    return sum(batch * max(lengths[i] for i in indices[b : b + batch]) for b in range(0, count, batch))


def test_grouped_order_is_a_permutation_with_far_less_padding():
    lengths = sst2_lengths()
    n, batch = len(lengths), 32
    grouped = LengthGroupedPermutations(lengths, seed=7, batch=batch)
    for epoch in range(2):
        assert sorted(grouped(epoch * n + p) for p in range(n)) == list(range(n))
    assert grouped.group_size == batch * min(50, n // (4 * batch))
    # Each batch holds neighbours in length order; the batches of a group come in random order, and the groups
    # are made up afresh every epoch.
    batches = [[lengths[grouped(p)] for p in range(b, b + batch)] for b in range(0, grouped.group_size, batch)]
    assert all(rows == sorted(rows, reverse=True) for rows in batches)
    assert [rows[0] for rows in batches] != sorted((rows[0] for rows in batches), reverse=True)
    assert [grouped(p) for p in range(64)] != [grouped(n + p) for p in range(64)]
    real = sum(lengths[: n // batch * batch])
    count = n // batch * batch
    shuffled = padded_tokens(EpochPermutations(n, seed=7), lengths, batch, count)
    sorted_ = padded_tokens(grouped, lengths, batch, count)
    assert (sorted_ - real) < 0.25 * (shuffled - real), (real, shuffled, sorted_)
    assert np.isclose(sum(lengths[grouped(p)] for p in range(n)), sum(lengths))


@pytest.mark.slow
def test_grouped_fine_tuning_reaches_the_shuffled_accuracy(finetune_config, tmp_path):
    common = [
        f"data.train_file={SST2_TRAIN}",
        f"data.validation_file={SST2_DEV}",
        "data.max_seq_len=64",
        "model.dropout=0",
        "optimizer.lr=1e-3",
        "optimizer.warmup_ratio=0",
        "trainer.batch_size=16",
        "trainer.max_steps=375",  # two epochs of the 3,000 bundled rows
        "trainer.log_every=50",
        "hardware.num_threads=1",
    ]
    accuracy = {}
    threads = torch.get_num_threads()
    try:
        for name, overrides in {
            "grouped": ["trainer.group_by_length=true"],
            "shuffled": ["trainer.group_by_length=false"],
            "shuffled_other_seed": ["trainer.group_by_length=false", "trainer.seed=99"],
        }.items():
            accuracy[name] = run(finetune_config(*common, *overrides), tmp_path / name)["eval_accuracy"]
    finally:
        torch.set_num_threads(threads)
    # One-sided: grouping must not cost accuracy beyond what sampling the dev set can explain. The bound is three
    # standard errors of the difference of two accuracies measured on all n dev rows.
    shuffled = (accuracy["shuffled"] + accuracy["shuffled_other_seed"]) / 2
    n = len(Path(SST2_DEV).read_text().splitlines()) - 1
    tolerance = 3 * math.sqrt(2 * shuffled * (1 - shuffled) / n)
    assert min(accuracy.values()) > 0.58, accuracy  # all of them learn (the majority class is 0.51)
    assert accuracy["grouped"] >= shuffled - tolerance, (accuracy, tolerance)
