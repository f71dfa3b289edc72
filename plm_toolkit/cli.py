"""What `plm-train` and `plm-finetune` share around their run: its first steps, the Hydra run directory in and a
one-line error out."""

from __future__ import annotations

import importlib.util
import logging
import sys
from collections.abc import Callable
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from plm_toolkit.config.validate import validate
from plm_toolkit.errors import PlmError
from plm_toolkit.training import checkpoint as ckpt
from plm_toolkit.training.distributed import (
    adopt_submitit_environment,
    destroy_process_group,
    init_process_group,
    launched_world_size,
)
from plm_toolkit.training.precision import Runtime, resolve_runtime
from plm_toolkit.training.preemption import EXIT_REQUEUE, Preempted

log = logging.getLogger("plm_toolkit")


# Hydra launchers that come from an optional extra: the override's prefix -> (package, extra).
LAUNCHER_EXTRAS = {"hydra/launcher=submitit": ("hydra_plugins.hydra_submitit_launcher", "slurm")}


def require_launcher_plugin(argv: list[str]) -> None:
    """Stop with the extra to install when the command line picks a launcher whose plugin is missing (Hydra alone
    would only list the launchers it has)."""
    for arg in argv:
        for prefix, (module, extra) in LAUNCHER_EXTRAS.items():
            if arg.startswith(prefix) and importlib.util.find_spec(module) is None:
                print(
                    f"error: {arg} needs the hydra-submitit-launcher package: pip install 'plm_toolkit[{extra}]'",
                    file=sys.stderr,
                )
                sys.exit(1)


def start_run(cfg: DictConfig, run_dir: Path) -> tuple[Runtime, ckpt.Checkpoint | None]:
    """Validate, choose the device and precision, join the process group under torchrun, clear half-written
    checkpoints and find the one ``trainer.resume`` names: the first steps of every run."""
    validate(cfg)
    adopt_submitit_environment()
    runtime = resolve_runtime(cfg.hardware)
    if launched_world_size() > 1 or runtime.fsdp:
        runtime = resolve_runtime(cfg.hardware, init_process_group(runtime.backend))
    if runtime.process.is_main:
        ckpt.clean_temporary(run_dir)
    return runtime, ckpt.find_checkpoint(str(cfg.trainer.resume), run_dir)


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
    except Preempted as stopped:
        log.warning("%s; exiting with status %d so that the job is requeued", stopped, EXIT_REQUEUE)
        sys.exit(EXIT_REQUEUE)
    finally:
        destroy_process_group(wait_for_peers=finished)
    return final.get("eval_loss", final.get("loss"))
