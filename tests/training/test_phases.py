"""trainer.phases: one run in sequence-length phases (BERT's 128 then 512), switched by step; a run resumed inside
the second phase continues that phase's data where the run that was not interrupted is."""

import pytest
import torch
from safetensors.torch import load_file

import plm_toolkit.training.batches as batches_module
from plm_toolkit.commands.train import run
from plm_toolkit.config.train_checks import problems
from plm_toolkit.training.phases import phase_bounds
from tests.training.conftest import read_metrics

# 6 steps of 8 rows of at most 24 tokens, then 4 steps of 4 rows of at most 48.
PHASES = "trainer.phases=[{fraction:0.6,max_seq_len:24,batch_size:8},{fraction:0.4,max_seq_len:48,batch_size:4}]"
COMMON = [PHASES, "trainer.max_steps=10", "trainer.seed=5", "objective.max_predictions_per_seq=null"]


def test_phase_bounds_are_shares_of_the_run():
    assert phase_bounds([0.9, 0.1], 1_000_000) == [(0, 900_000), (900_000, 1_000_000)]
    assert phase_bounds([1 / 3, 1 / 3, 1 / 3], 10) == [(0, 3), (3, 7), (7, 10)]


@pytest.mark.slow
def test_phases_switch_length_and_batch_and_resume_inside_the_second_exactly(make_config, tmp_path, monkeypatch):
    readers = []  # (first micro-batch, rows per micro-batch, longest example) of every phase reader built

    class Recorded(batches_module.MicroBatches):
        def __init__(self, examples, layout, start, *args, **kwargs):
            super().__init__(examples, layout, start, *args, **kwargs)
            readers.append((start, layout.batch_size, max(len(e["input_ids"]) for e in examples)))

    monkeypatch.setattr(batches_module, "MicroBatches", Recorded)
    straight = tmp_path / "straight"
    run(make_config(*COMMON, "trainer.save_every=7", "trainer.keep_last=0"), straight)
    # Phase 1 from its start at 24 tokens, phase 2 from its start at 48 (its examples longer than phase 1's).
    assert [(start, rows) for start, rows, _ in readers] == [(0, 8), (0, 4)]
    assert readers[0][2] <= 24 < readers[1][2] <= 48

    # Resume from step 7, one step into phase 2: its reader starts one global batch (4 rows) in.
    readers.clear()
    resumed = tmp_path / "resumed"
    run(make_config(*COMMON, f"trainer.resume={straight / 'checkpoints' / 'step_7'}"), resumed)
    assert [(start, rows) for start, rows, _ in readers] == [(4, 4)]
    a, b = read_metrics(straight), read_metrics(resumed)
    training = lambda records: [(r["step"], r["loss"], r["lr"]) for r in records if "loss" in r]  # noqa: E731
    assert training(b) == training(a)[7:]
    wa = load_file(straight / "checkpoints" / "last" / "model.safetensors")
    wb = load_file(resumed / "checkpoints" / "last" / "model.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.mark.parametrize(
    "overrides,expected",
    [
        (["trainer.phases=[{fraction:0.9,max_seq_len:32},{fraction:0.2,max_seq_len:64}]"], "sum to 1.1"),
        (["trainer.phases=[{fraction:0.5,max_seq_len:32},{fraction:0.5,max_seq_len:128}]"], "at most the model's 64"),
        (["trainer.phases=[{fraction:1.0,max_seq_len:32}]", "trainer.max_steps=null", "trainer.epochs=1"],
         "not trainer.epochs"),
        (["trainer.phases=[{fraction:1.0,max_seq_len:32}]", "model=xlnet_tiny"], "the streams layout cannot change"),
        (["trainer.phases=[{fraction:0.999,max_seq_len:32},{fraction:0.001,max_seq_len:64}]"], "less than one of"),
    ],
)  # fmt: skip
def test_impossible_phases_are_refused(make_config, overrides, expected):
    # XLNet's tiny preset as it is (the tiny BERT's sizes do not apply to it).
    found = problems(make_config(*overrides, tiny="model=xlnet_tiny" not in overrides))
    assert any(expected in message for message in found), found
