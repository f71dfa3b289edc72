"""plm-finetune's length as transformers' Trainer users give it: trainer.max_steps=N alone on the command line counts
the run in steps and sets the default trainer.epochs=3 aside (one log line naming both); both keys given stay an
error."""

import shutil
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_module
from omegaconf import open_dict

from plm_toolkit.config.lengths import command_line_values, steps_over_epochs
from plm_toolkit.config.validate import validate
from plm_toolkit.core.errors import ConfigError

from .conftest import SST2_DEV, SST2_TRAIN

SST2 = [f"data.train_file={SST2_TRAIN}", f"data.validation_file={SST2_DEV}"]


def composed(tiny_checkpoint, *overrides: str):
    """The finetune config as plm-finetune composes it, then the length rule applied to its command line."""
    with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
        cfg = compose(
            "finetune", overrides=[f"model.checkpoint={tiny_checkpoint}", *SST2, *overrides], return_hydra_config=True
        )
    note = steps_over_epochs(cfg, cfg.hydra.overrides.task)
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg, note


def test_max_steps_alone_sets_the_default_epochs_aside(tiny_checkpoint):
    cfg, note = composed(tiny_checkpoint, "trainer.max_steps=7")
    assert cfg.trainer.max_steps == 7 and cfg.trainer.epochs is None
    assert note.startswith("trainer.max_steps=7 from the command line sets the run's length: trainer.epochs=3 ")
    validate(cfg)


@pytest.mark.parametrize(
    "overrides",
    [
        ["trainer.epochs=2"],  # epochs alone: the default max_steps is null already
        ["trainer.max_steps=null"],  # no number of steps given
        ["trainer.epochs=null", "trainer.max_steps=7"],  # the old spelling, still fine
    ],
)
def test_nothing_changes_unless_max_steps_alone_meets_the_default_epochs(tiny_checkpoint, overrides):
    cfg, note = composed(tiny_checkpoint, *overrides)
    assert note is None
    validate(cfg)


def test_both_lengths_on_the_command_line_are_refused(tiny_checkpoint):
    cfg, note = composed(tiny_checkpoint, "trainer.max_steps=7", "trainer.epochs=3")
    assert note is None and cfg.trainer.epochs == 3
    with pytest.raises(ConfigError, match=r"trainer.max_steps=7 and trainer.epochs=3.0: give exactly one length"):
        validate(cfg)


def test_command_line_values_read_prefixes_and_nulls():
    values = command_line_values(["++trainer.max_steps=5", "+task.x=null", "~trainer.epochs", "task=rte"])
    assert values == {"trainer.max_steps": 5, "task.x": None, "task": "rte"}


@pytest.mark.slow
def test_the_real_command_line_trains_max_steps_and_says_why(tiny_checkpoint, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(tiny_checkpoint, tmp_path / "pretrained")
    quiet = ["trainer.progress_bar=false", "trainer.tensorboard=false", "hardware=cpu"]
    command = [
        sys.executable,
        "-m",
        "plm_toolkit.commands.finetune",
        f"model.checkpoint={tmp_path / 'pretrained'}",
        *SST2,
    ]
    command += [*quiet, "data.max_train_samples=16", "data.max_eval_samples=8", "trainer.batch_size=8"]
    command += ["trainer.max_steps=3", f"hydra.run.dir={out}"]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    log = (out / "finetune.log").read_text()
    assert "trainer.max_steps=3 from the command line sets the run's length: trainer.epochs=3 (the default)" in log
    # 3 steps of 8 rows over 16 examples: the step count, not 3 epochs (6 steps).
    assert "training for 3 optimizer steps: 1.5 epochs of 16 examples at a global batch of 8" in log
    assert (out / "checkpoints" / "step_3" / "model.safetensors").is_file()
