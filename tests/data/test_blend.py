"""The blend of data.sources (data/layouts/blend.py): Megatron's greedy table, the shares the loader really reads, epochs
per source, determinism in the seed and a resume that reads exactly what the uninterrupted run reads."""

import numpy as np
import pytest

from plm_toolkit.data.batching.loader import BatchLayout, MicroBatches
from plm_toolkit.data.layouts.blend import PERIOD, BlendedExamples, SourceValidation, greedy_table


class Rows:
    """A source of ``n`` examples whose rows say where they come from."""

    column_names = ["input_ids"]

    def __init__(self, source: int, n: int):
        self.source, self.n = source, n

    def __len__(self) -> int:
        return self.n

    def rows(self, indices):
        return [{"input_ids": [self.source, int(k)]} for k in indices]


def blend(sizes=(50, 23, 7), weights=(0.6, 0.3, 0.1)) -> BlendedExamples:
    return BlendedExamples([f"s{k}" for k in range(len(sizes))], [Rows(k, n) for k, n in enumerate(sizes)], weights)


def read(examples, start: int, micro_batches: int, seed: int = 5, batch=(7, 2, 1, 0)) -> list[list[int]]:
    """The rows (source, example) of ``micro_batches`` micro-batches from stream position ``start``."""
    micro = MicroBatches(examples, BatchLayout(*batch), start, lambda rows: rows, None, seed)
    return [row["input_ids"] for k in range(micro_batches) for row in micro[k]]


def test_greedy_table_keeps_every_prefix_within_one_example_of_its_share():
    weights = np.array([0.5, 0.3, 0.15, 0.05])
    table = greedy_table(weights, 5000)
    counts = np.cumsum(np.eye(4, dtype=np.int64)[table], axis=0)  # (positions, sources)
    expected = np.arange(1, 5001)[:, None] * weights
    assert np.abs(counts - expected).max() <= 1.0
    assert list(greedy_table([0.6, 0.3, 0.1], 10)).count(0) == 6  # a batch of 10 holds 6, 3 and 1


def test_weights_are_normalized_and_a_zero_weight_is_never_drawn():
    assert list(greedy_table([0.0, 2.0, 2.0], 400)).count(0) == 0
    assert np.array_equal(greedy_table([6, 3, 1], 100), greedy_table([0.6, 0.3, 0.1], 100))


def test_realized_shares_of_the_rows_read_are_the_weights_and_epochs_are_counted():
    examples = blend()
    rows = read(examples, 0, 300)  # 2,100 rows
    shares = np.bincount([source for source, _ in rows], minlength=3) / len(rows)
    assert np.allclose(shares, [0.6, 0.3, 0.1], atol=0.01)
    metrics = examples.realized(len(rows))
    assert [round(metrics[f"blend_share/s{k}"], 3) for k in range(3)] == [round(s, 3) for s in shares]
    # Source 2 (7 examples, 10% of 2,100 rows): 30 epochs, each a permutation of its examples.
    assert metrics["blend_epochs/s2"] == pytest.approx(210 / 7)
    small = [k for source, k in rows if source == 2]
    for epoch in range(30):
        assert sorted(small[epoch * 7 : (epoch + 1) * 7]) == list(range(7))
    # Down-sampled: source 0 (50 examples) is read 1,260 / 50 = 25.2 times, with no repeat inside an epoch.
    large = [k for source, k in rows if source == 0]
    assert sorted(large[:50]) == list(range(50))


def test_order_is_a_pure_function_of_seed_and_position():
    examples = blend()
    straight = read(examples, 0, 40)
    resumed = read(examples, 20 * 7, 20)  # a run resumed after 20 steps of 7 rows
    assert straight[20 * 7 :] == resumed
    assert read(examples, 0, 40) == straight
    assert read(examples, 0, 40, seed=6) != straight
    # 2 processes x 2 micro-batches read the same rows as 1 process x 4 in one optimizer step.
    two = [read(examples, 0, 2, batch=(7, 2, 2, rank)) for rank in (0, 1)]
    one = read(examples, 0, 4, batch=(7, 4, 1, 0))
    assert sorted(two[0] + two[1]) == sorted(one)


def test_draw_continues_past_the_table_period():
    examples = blend((5, 5), (0.5, 0.5))
    assert examples.draw(PERIOD + 3) == (examples.draw(3)[0], PERIOD // 2 + examples.draw(3)[1])
    assert examples.drawn(3 * PERIOD + 10).sum() == 3 * PERIOD + 10


def test_validation_keeps_each_source_apart():
    validation = SourceValidation(["a", "b"], [Rows(0, 3), Rows(1, 2)])
    assert len(validation) == 5
    assert validation.rows([4, 0, 3]) == [{"input_ids": [1, 1]}, {"input_ids": [0, 0]}, {"input_ids": [1, 0]}]
    assert list(validation.sources) == ["a", "b"]
