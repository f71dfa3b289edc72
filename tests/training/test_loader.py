import torch

from plm_toolkit.data.batching.loader import BatchLayout, EpochPermutations, MicroBatches, mix_seed


def collate(rows):
    return {"x": torch.tensor([r["x"] for r in rows])}


def transform(batch, seeds):
    # Records each row's seed, which must depend only on the row's stream position.
    return {**batch, "seed": torch.tensor([s % 1000003 for s in seeds])}


def global_rows(layout, steps, n=37):
    """(example, seed) pairs of every optimizer step, gathered over ranks and micro-batches."""
    examples = [{"x": i} for i in range(n)]
    out = []
    for rank in range(layout.world_size):
        lay = BatchLayout(layout.batch_size, layout.grad_accum_steps, layout.world_size, rank)
        ds = MicroBatches(examples, lay, 0, collate, transform, seed=7)
        for k in range(steps * layout.grad_accum_steps):
            b = ds[k]
            step = k // layout.grad_accum_steps
            out += [(step, int(x), int(s)) for x, s in zip(b["x"], b["seed"], strict=True)]
    return sorted(out)


def test_same_rows_and_seeds_whatever_the_split():
    one = global_rows(BatchLayout(32, 1, 1), steps=5)
    accumulated = global_rows(BatchLayout(4, 8, 1), steps=5)
    two_ranks = global_rows(BatchLayout(8, 2, 2), steps=5)
    assert one == accumulated == two_ranks
    assert len(one) == 160


def test_epochs_are_permutations_and_differ():
    perm = EpochPermutations(50, seed=3)
    first = [perm(p) for p in range(50)]
    second = [perm(p) for p in range(50, 100)]
    assert sorted(first) == sorted(second) == list(range(50))
    assert first != second


def test_resuming_at_a_position_continues_the_stream():
    examples = [{"x": i} for i in range(23)]
    layout = BatchLayout(3, 2, 1)
    full = MicroBatches(examples, layout, 0, collate, transform, seed=1)
    resumed = MicroBatches(examples, layout, 4 * layout.global_batch, collate, transform, seed=1)
    for k in range(6):
        assert torch.equal(full[8 + k]["x"], resumed[k]["x"])
        assert torch.equal(full[8 + k]["seed"], resumed[k]["seed"])


def test_mix_seed_spreads_and_is_stable():
    seeds = {mix_seed(1, p) for p in range(10000)}
    assert len(seeds) == 10000
    assert all(0 <= s < 2**63 for s in seeds)
    assert mix_seed(1, 5) == mix_seed(1, 5) != mix_seed(2, 5)


def test_a_step_dependent_transform_gets_the_optimizer_step():
    """Micro-batch k of a run resumed at step s carries step s + k // grad_accum_steps, as without the resume."""
    examples = [{"x": i} for i in range(23)]
    layout = BatchLayout(3, 2, 1)

    def with_step(batch, seeds, step):
        return {**batch, "step": torch.full((len(seeds),), step)}

    full = MicroBatches(examples, layout, 0, collate, with_step, seed=1, first_step=0)
    resumed = MicroBatches(examples, layout, 4 * layout.global_batch, collate, with_step, seed=1, first_step=4)
    assert [int(full[k]["step"][0]) for k in range(6)] == [0, 0, 1, 1, 2, 2]
    for k in range(6):
        assert torch.equal(full[8 + k]["step"], resumed[k]["step"])
        assert int(resumed[k]["step"][0]) == 4 + k // 2


def test_data_workers_train_exactly_as_the_training_process_does(make_config, tmp_path):
    """data.num_workers prepares the batches in other processes (what a GPU run wants, so that the host's work
    overlaps the device's): each batch is a function of its index, so the losses are the same to the last digit."""
    from plm_toolkit.commands.train import run
    from tests.training.conftest import train_records

    common = ("objective=mlm", "trainer.max_steps=6", "trainer.log_every=1", "trainer.eval_every=0")
    run(make_config(*common, "data.num_workers=0"), tmp_path / "in_process")
    run(make_config(*common, "data.num_workers=2"), tmp_path / "workers")
    in_process, workers = train_records(tmp_path / "in_process"), train_records(tmp_path / "workers")
    assert len(workers) == 6
    assert [r["loss"] for r in workers] == [r["loss"] for r in in_process]
