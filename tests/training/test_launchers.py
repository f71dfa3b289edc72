"""Launching through Hydra's submitit plugin: a 2-task local job trains to the end as one data-parallel run, and a
missing plugin is named with the extra that installs it."""

import importlib.util
import json

import pytest

from plm_toolkit.commands import run_harness as cli
from plm_toolkit.core.errors import ConfigError

from .conftest import TINY
from .test_train import launch


@pytest.mark.distributed
@pytest.mark.slow
def test_submitit_local_two_task_job_runs_to_the_end(small_corpus, tmp_path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="needs the slurm extra")
    sweep = tmp_path / "sweep"
    result = launch(
        [
            "-m",
            "hydra/launcher=submitit_local",
            "hydra.launcher.tasks_per_node=2",
            f"hydra.sweep.dir={sweep}",
            *TINY,
            "hardware.distributed=ddp",
            "data=text_files",
            f"data.train_files=[{small_corpus['train']}]",
            f"data.cache_dir={small_corpus['cache']}",
            "trainer.batch_size=4",
            "trainer.max_steps=3",
        ],
        tmp_path,
        timeout=600,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    steps = [json.loads(line)["step"] for line in (sweep / "0" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]
    assert (sweep / "0" / "checkpoints" / "step_3" / "model.safetensors").is_file()
    logs = "".join(p.read_text() for p in sweep.glob(".submitit/*/*_log.*"))
    assert "submitit task 0 of 2" in logs and "submitit task 1 of 2" in logs and "processes=2" in logs


def test_missing_submitit_plugin_names_the_extra(monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(cli.importlib.util, "find_spec", lambda name: None if "submitit" in name else real(name))
    cli.require_launcher_plugin(["model=bert_tiny"])  # no launcher asked for: nothing happens
    with pytest.raises(ConfigError) as stop:
        cli.require_launcher_plugin(["-m", "hydra/launcher=submitit_slurm", "hydra.launcher.nodes=2"])
    assert str(stop.value) == (
        "hydra/launcher=submitit_slurm needs the hydra-submitit-launcher package: pip install 'plm_toolkit[slurm]'"
    )
