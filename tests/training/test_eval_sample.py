"""Which validation batches an evaluation scores: trainer.eval_batches of them as a fixed random sample spread over
the whole validation set (the same rows and masks at every evaluation, on any number of processes), all of them when
they are that few; stream-order layouts keep the first windows of every sub-stream. The run logs which, once."""

import logging

import numpy as np
import torch

from plm_toolkit.commands.train import run
from plm_toolkit.data.batching.loader import eval_loader, eval_rows, eval_scope, mix_seed


def collate(rows):
    return {"x": torch.tensor([r["x"] for r in rows])}


def transform(batch, seeds):
    return {**batch, "seed": torch.tensor([s % 1000003 for s in seeds])}


def test_a_sample_spread_over_the_whole_set_the_same_every_time():
    rows = eval_rows(10_000, 8, 20, seed=5)
    assert len(rows) == len(set(rows)) == 160 and rows == sorted(rows)
    assert rows == eval_rows(10_000, 8, 20, seed=5) != eval_rows(10_000, 8, 20, seed=6)
    # Spread: every tenth of the file is read (the first 20 batches would read 1.6% of it, all at its start).
    assert np.histogram(rows, bins=10, range=(0, 10_000))[0].min() >= 5


def test_the_whole_set_when_it_fits_in_eval_batches_or_eval_batches_is_zero():
    assert eval_rows(37, 8, 5, seed=1) == range(37)  # 5 batches: 40 rows would hold all 37
    assert eval_rows(37, 8, 0, seed=1) == range(37)
    assert len(eval_rows(41, 8, 5, seed=1)) == 40


def test_batches_hold_the_sample_with_each_rows_masks_on_any_number_of_processes():
    examples = [{"x": i} for i in range(103)]

    def batches(world, rank):
        return list(eval_loader(examples, 4, world, rank, collate, transform, 9, 6))

    one = batches(1, 0)
    rows = eval_rows(103, 4, 6, seed=9)
    assert torch.cat([b["x"] for b in one]).tolist() == list(rows)
    assert torch.cat([b["seed"] for b in one]).tolist() == [mix_seed(9, r, stream=1) % 1000003 for r in rows]
    # Two processes deal the same batches out round-robin.
    first, second = batches(2, 0), batches(2, 1)
    dealt = [b for pair in zip(first, second, strict=True) for b in pair]
    assert all(torch.equal(a["x"], b["x"]) for a, b in zip(dealt, one, strict=True))
    # eval_batches=0: every row, in file order, as before.
    assert torch.cat([b["x"] for b in eval_loader(examples, 4, 1, 0, collate, None, 9, 0)]).tolist() == list(range(103))


def test_the_log_line_says_which_batches():
    assert eval_scope(37, 8, 1, 5, streams=False) == "evaluation: all 5 validation batches (37 rows)"
    assert eval_scope(1000, 8, 1, 20, streams=False) == (
        "evaluation: 20 of 125 validation batches (160 of 1000 rows), a fixed random sample spread over the file, "
        "the same at every evaluation; trainer.eval_batches=0 scores all"
    )
    # Streams: 1000 windows over 8 sub-streams of 125; 3 processes take 7 rounds each for 20 batches.
    assert eval_scope(1000, 4, 2, 0, streams=True) == (
        "evaluation: all 250 validation batches, in stream order from an empty memory"
    )
    assert eval_scope(1000, 4, 2, 20, streams=True).startswith(
        "evaluation: 20 of 250 validation batches: the first 10 windows of each of the 8 sub-streams (contiguous runs"
    )


def test_a_run_logs_its_evaluation_sample(make_config, tmp_path, caplog):
    cfg = make_config("trainer.max_steps=1", "trainer.eval_every=1", "trainer.eval_batches=2", "trainer.batch_size=4")
    with caplog.at_level(logging.INFO, logger="plm_toolkit"):
        final = run(cfg, tmp_path)
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("evaluation:")]
    assert line.startswith("evaluation: 2 of ") and "(8 of " in line and "a fixed random sample" in line
    assert np.isfinite(final["eval_loss"])
