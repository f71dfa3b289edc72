"""plm-average: the mean of the last N checkpoints' weights, written as a loadable checkpoint."""

import json

import pytest
import torch

from plm_toolkit.commands.average import average_checkpoints
from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core.errors import CheckpointError
from plm_toolkit.core.weights import read_weights


def save(run_dir, step, value):
    model = torch.nn.Linear(3, 2)
    torch.nn.init.constant_(model.weight, value)
    torch.nn.init.constant_(model.bias, -value)
    model.register_buffer("count", torch.tensor([step]))
    head = torch.nn.Linear(2, 1)
    torch.nn.init.constant_(head.weight, 2 * value)
    state = {"step": step, "samples_seen": step, "rng": ckpt.rng_state()}
    ckpt.save_checkpoint(run_dir, step, model, head, state, f"step: {step}\n", '{"t": 1}', keep_last=0)


def test_average_of_the_last_n(tmp_path):
    for step, value in ((10, 1.0), (20, 2.0), (30, 4.0), (40, 9.0)):
        save(tmp_path, step, value)
    out = average_checkpoints(tmp_path, 3, tmp_path / "avg")
    model = read_weights(out / ckpt.MODEL_FILE)
    assert torch.allclose(model["weight"], torch.full((2, 3), 5.0))
    assert torch.allclose(model["bias"], torch.full((2,), -5.0))
    assert model["count"].tolist() == [40]  # integers are not averaged: the newest is kept
    assert torch.allclose(read_weights(out / ckpt.OBJECTIVE_FILE)["weight"], torch.full((1, 2), 10.0))
    assert (out / ckpt.CONFIG_FILE).read_text() == "step: 40\n"
    assert (out / ckpt.TOKENIZER_FILE).is_file()
    assert json.loads((out / "averaged.json").read_text())["steps"] == [20, 30, 40]
    # Writing again over an averaged folder replaces it; over anything else it refuses.
    average_checkpoints(tmp_path, 1, tmp_path / "avg")
    assert torch.allclose(read_weights(out / ckpt.MODEL_FILE)["weight"], torch.full((2, 3), 9.0))
    (tmp_path / "other").mkdir()
    with pytest.raises(CheckpointError, match="not an averaged checkpoint"):
        average_checkpoints(tmp_path, 1, tmp_path / "other")


def test_too_few_checkpoints_are_refused(tmp_path):
    save(tmp_path, 10, 1.0)
    with pytest.raises(CheckpointError, match="asked to average 5 checkpoints but it has 1 .*keep_last >= 5"):
        average_checkpoints(tmp_path, 5, tmp_path / "avg")
    assert not (tmp_path / "avg").exists()
