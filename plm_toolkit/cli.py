"""What `plm-train` and `plm-finetune` share around their run: its first steps, the Hydra run directory in and a
one-line error out."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from plm_toolkit.config.validate import validate
from plm_toolkit.errors import PlmError
from plm_toolkit.training import checkpoint as ckpt
from plm_toolkit.training.distributed import destroy_process_group, init_process_group, launched_world_size
from plm_toolkit.training.precision import Runtime, resolve_runtime

log = logging.getLogger("plm_toolkit")


def start_run(cfg: DictConfig, run_dir: Path) -> tuple[Runtime, ckpt.Checkpoint | None]:
    """Validate, choose the device and precision, join the process group under torchrun, clear half-written
    checkpoints and find the one ``trainer.resume`` names: the first steps of every run."""
    validate(cfg)
    runtime = resolve_runtime(cfg.hardware)
    if launched_world_size() > 1:
        runtime = resolve_runtime(cfg.hardware, init_process_group(runtime.backend))
    if runtime.process.is_main:
        ckpt.clean_temporary(run_dir)
    return runtime, ckpt.find_checkpoint(str(cfg.trainer.resume), run_dir)


EVAL_RESULTS = "eval_results.json"


def write_json(path: Path, value) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n")
    tmp.replace(path)


def write_results(run_dir: Path, objective) -> None:
    """The last evaluation's figures (``eval_results.json``) and files (``artifacts``: predictions,
    translations) of an objective or task that keeps them (``last_metrics``), into the run directory."""
    metrics = getattr(objective, "last_metrics", None)
    if not metrics:
        return
    for name, value in objective.artifacts.items():
        if isinstance(value, str):
            (run_dir / name).write_text(value)
        else:
            write_json(run_dir / name, value)
    write_json(run_dir / EVAL_RESULTS, metrics)
    log.info("eval results: %s %s", run_dir / EVAL_RESULTS, json.dumps(metrics))


def run_command(run: Callable[[DictConfig, Path], dict], cfg: DictConfig) -> float | None:
    """Run in Hydra's output directory; a PlmError (bad input, impossible config) exits 1 with its message alone.
    Returns the final evaluation loss (else the training loss) for Hydra sweepers that optimise an objective."""
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    finished = False
    try:
        final = run(cfg, run_dir)
        finished = True
    except PlmError as err:
        log.error("error: %s", err)
        sys.exit(1)
    finally:
        destroy_process_group(wait_for_peers=finished)
    return final.get("eval_loss", final.get("loss"))
