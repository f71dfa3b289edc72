import os
import re
import shutil

import pytest
import torch

from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core.errors import CheckpointError
from plm_toolkit.core.weights import load_weights, read_torch_weights, save_weights


def save(run_dir, step, model, keep_last=2):
    state = {"step": step, "samples_seen": step * 4, "rng": ckpt.rng_state()}
    return ckpt.save_checkpoint(run_dir, step, model, torch.nn.Linear(2, 1), state, "a: 1\n", "{}", keep_last)


def test_save_layout_last_link_and_prune(tmp_path):
    model = torch.nn.Linear(3, 2)
    for step in (10, 20, 30):
        save(tmp_path, step, model)
    root = tmp_path / "checkpoints"
    assert sorted(p.name for p in root.iterdir()) == ["last", "step_20", "step_30"]
    assert os.readlink(root / "last") == "step_30"
    for name in ("model.safetensors", "objective.safetensors", "config.yaml", "tokenizer.json", "trainer_state.pt"):
        assert (root / "step_30" / name).is_file()
    found = ckpt.find_checkpoint("auto", tmp_path)
    assert found.step() == 30
    assert found.trainer_state()["samples_seen"] == 120


def test_weights_round_trip_exactly(tmp_path):
    model = torch.nn.Linear(3, 2)
    path = save(tmp_path, 1, model)
    other = torch.nn.Linear(3, 2)
    load_weights(other, path / ckpt.MODEL_FILE)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), other.state_dict().values(), strict=True))


def test_half_written_checkpoint_is_ignored_and_cleaned(tmp_path):
    save(tmp_path, 5, torch.nn.Linear(3, 2))
    crashed = tmp_path / "checkpoints" / ".tmp-step_10-999"
    crashed.mkdir()
    (crashed / "model.safetensors").write_bytes(b"partial")
    incomplete = tmp_path / "checkpoints" / "step_10"  # renamed but without its state file: not complete
    incomplete.mkdir()
    assert ckpt.find_checkpoint("auto", tmp_path).step() == 5
    ckpt.clean_temporary(tmp_path)
    assert not crashed.exists()
    assert (tmp_path / "checkpoints" / "step_5").is_dir()


def test_resume_path_errors(tmp_path):
    assert ckpt.find_checkpoint("auto", tmp_path) is None
    assert ckpt.find_checkpoint("none", tmp_path) is None
    with pytest.raises(CheckpointError, match="trainer.resume=.*no checkpoint there"):
        ckpt.find_checkpoint(str(tmp_path / "nowhere"), tmp_path)
    run = tmp_path / "run"
    save(run, 3, torch.nn.Linear(3, 2))
    assert ckpt.find_checkpoint(str(run), tmp_path).step() == 3
    assert ckpt.find_checkpoint(str(run / "checkpoints" / "step_3"), tmp_path).step() == 3


def test_corrupt_and_incompatible_weights_name_the_file(tmp_path):
    path = save(tmp_path, 1, torch.nn.Linear(3, 2))
    with pytest.raises(CheckpointError, match="incompatible shapes.*weight"):
        load_weights(torch.nn.Linear(4, 2), path / ckpt.MODEL_FILE)
    with pytest.raises(CheckpointError, match="missing keys"):
        load_weights(torch.nn.Sequential(torch.nn.Linear(3, 2)), path / ckpt.MODEL_FILE)
    (path / ckpt.MODEL_FILE).write_bytes(b"\x00garbage")
    with pytest.raises(CheckpointError, match="model.safetensors: not a readable safetensors file"):
        load_weights(torch.nn.Linear(3, 2), path / ckpt.MODEL_FILE)
    (path / ckpt.STATE_FILE).write_bytes(b"not a torch file")
    with pytest.raises(CheckpointError, match="trainer_state.pt: not a readable training state"):
        ckpt.Checkpoint(path).trainer_state()


def test_rng_state_round_trip():
    import random

    import numpy as np

    state = ckpt.rng_state()
    a = (torch.rand(3), random.random(), np.random.rand())
    ckpt.set_rng_state(state)
    b = (torch.rand(3), random.random(), np.random.rand())
    assert torch.equal(a[0], b[0]) and a[1] == b[1] and a[2] == b[2]


def test_tied_weights_saved_once(tmp_path):
    emb = torch.nn.Embedding(5, 3)
    head = torch.nn.Linear(3, 5, bias=False)
    head.weight = emb.weight
    model = torch.nn.ModuleDict({"emb": emb, "head": head})
    save_weights(model, tmp_path / "w.safetensors")
    other = torch.nn.ModuleDict({"emb": torch.nn.Embedding(5, 3), "head": torch.nn.Linear(3, 5, bias=False)})
    other["head"].weight = other["emb"].weight
    load_weights(other, tmp_path / "w.safetensors")
    assert torch.equal(other["head"].weight, emb.weight)


def test_step_comes_from_the_training_state_not_the_folder_name(tmp_path):
    """A checkpoint copied under another name (a user's backup) still knows its step."""
    saved = save(tmp_path, 7, torch.nn.Linear(3, 2))
    copy = tmp_path / "backup-before-the-lr-change"
    shutil.copytree(saved, copy)
    found = ckpt.find_checkpoint(str(copy), tmp_path)
    assert found.path == copy.resolve() and found.step() == 7


def test_every_checkpoint_file_is_readable_by_the_group_and_others_under_umask_022(tmp_path):
    """A team on a shared cluster reads each other's checkpoints (safetensors alone writes 0600)."""
    previous = os.umask(0o022)
    try:
        save(tmp_path, 10, torch.nn.Linear(3, 2))
    finally:
        os.umask(previous)
    files = sorted((tmp_path / "checkpoints" / "step_10").iterdir())
    assert files and {p.name: oct(p.stat().st_mode & 0o777) for p in files} == {p.name: "0o644" for p in files}


def test_half_precision_weights_load_widened_and_garbage_is_refused(tmp_path):
    from safetensors.torch import save_file

    model = torch.nn.Linear(3, 2)
    weights = {"weight": torch.randn(2, 3), "bias": torch.randn(2)}
    for dtype in (torch.float16, torch.bfloat16):
        save_file({k: v.to(dtype) for k, v in weights.items()}, str(tmp_path / "half.safetensors"))
        load_weights(model, tmp_path / "half.safetensors")
        assert model.weight.dtype == torch.float32
        assert torch.equal(model.weight.data, weights["weight"].to(dtype).float())
    bad = {
        "ints": ({"weight": torch.ones(2, 3, dtype=torch.int64)}, "weight is int64; expected floating-point weights"),
        "nan": ({"weight": torch.full((2, 3), float("nan"))}, "weight holds 6 NaN and 0 infinite value(s)"),
        "inf": ({"bias": torch.tensor([1.0, -float("inf")])}, "bias holds 0 NaN and 1 infinite value(s)"),
    }
    for name, (changed, expected) in bad.items():
        save_file(weights | changed, str(tmp_path / f"{name}.safetensors"))
        with pytest.raises(CheckpointError, match=re.escape(expected)):
            load_weights(model, tmp_path / f"{name}.safetensors")


def test_torch_weights_refusals_are_one_short_line(tmp_path, recwarn):
    (tmp_path / "empty.bin").write_bytes(b"")
    with pytest.raises(CheckpointError, match="empty.bin: empty file; expected a PyTorch state dict of tensors"):
        read_torch_weights(tmp_path / "empty.bin")
    torch.save({"w": torch.ones(2)}, tmp_path / "cut.bin")
    data = (tmp_path / "cut.bin").read_bytes()
    (tmp_path / "cut.bin").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError) as cut:
        read_torch_weights(tmp_path / "cut.bin")
    message = str(cut.value).replace(str(tmp_path), "")
    assert "cut.bin: not a readable PyTorch weights file (" in message and len(message) < 160
    import pickle

    (tmp_path / "raw.bin").write_bytes(pickle.dumps({"w": [1, 2]}, protocol=4))
    with pytest.raises(CheckpointError, match="raw.bin: not a PyTorch weights file that loads safely"):
        read_torch_weights(tmp_path / "raw.bin")
    assert not [w for w in recwarn if "pickle protocol" in str(w.message)]
