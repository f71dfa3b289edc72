"""What `plm-train` and `plm-finetune` share around their run: its first steps, the loop's set-up, the Hydra run
directory in, and expected failures out as one line (``failures.py``)."""

from __future__ import annotations

import importlib.util
import json
import logging
import random
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from plm_toolkit.commands import failures
from plm_toolkit.config import setup
from plm_toolkit.config.validate import evaluation_only, validate
from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core.errors import ConfigError, DataError
from plm_toolkit.core.run_lock import lock_run_directory, release
from plm_toolkit.training.distributed import (
    adopt_submitit_environment,
    destroy_process_group,
    init_process_group,
    launched_rank,
    launched_world_size,
)
from plm_toolkit.training.loop import Trainer
from plm_toolkit.training.precision import Runtime, resolve_runtime
from plm_toolkit.training.preemption import EXIT_REQUEUE, Preempted
from plm_toolkit.training.resume import starting_checkpoint

log = logging.getLogger("plm_toolkit")


# Hydra launchers that come from an optional extra: the override's prefix -> (package, extra).
LAUNCHER_EXTRAS = {"hydra/launcher=submitit": ("hydra_plugins.hydra_submitit_launcher", "slurm")}


def require_launcher_plugin(argv: list[str]) -> None:
    """Stop with the extra to install when the command line picks a launcher whose plugin is missing (Hydra alone
    would only list the launchers it has)."""
    for arg in argv:
        for prefix, (module, extra) in LAUNCHER_EXTRAS.items():
            if arg.startswith(prefix) and importlib.util.find_spec(module) is None:
                raise ConfigError(
                    f"{arg} needs the hydra-submitit-launcher package: pip install 'plm_toolkit[{extra}]'"
                )


def start_run(cfg: DictConfig, run_dir: Path) -> tuple[Runtime, ckpt.Checkpoint | None]:
    """Validate, choose the device and precision, join the process group under torchrun, clear half-written
    checkpoints and find the one ``trainer.resume`` names, refusing one whose config changed what is trained
    (``training/resume.py``): the first steps of every run, before any data work."""
    validate(cfg)
    adopt_submitit_environment()
    runtime = resolve_runtime(cfg.hardware)
    if launched_world_size() > 1 or runtime.fsdp:
        runtime = resolve_runtime(cfg.hardware, init_process_group(runtime.backend))
    if runtime.process.is_main:
        ckpt.clean_temporary(run_dir)
    return runtime, starting_checkpoint(cfg, run_dir, runtime.process.is_main)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def fit(
    cfg: DictConfig,
    run_dir: Path,
    runtime: Runtime,
    checkpoint: ckpt.Checkpoint | None,
    *,
    resolved: dict,
    tokenizer_json: str | None,
    optimizer_cfg=None,
    **pieces,
) -> tuple[Trainer, dict]:
    """The loop over what a command built (``pieces``: model, objective, train_examples, eval_examples, collate and
    optionally streams), resumed from ``checkpoint``; ``resolved`` is the config saved with every checkpoint."""
    if len(pieces["train_examples"]) == 0 and not evaluation_only(cfg.trainer):
        raise DataError("the training data holds no examples: check data.train_file(s) and data.max_train_samples")
    trainer = Trainer(
        **pieces,
        runtime=runtime,
        trainer_cfg=cfg.trainer,
        optimizer_cfg=cfg.optimizer if optimizer_cfg is None else optimizer_cfg,
        hardware_cfg=cfg.hardware,
        run_dir=run_dir,
        config_yaml=OmegaConf.to_yaml(OmegaConf.create(resolved)),
        tokenizer_json=tokenizer_json,
        num_workers=cfg.data.num_workers,
        data_keys=("data.train_files", "data.validation_files")
        if "train_files" in cfg.data
        else ("data.train_file", "data.validation_file"),
    )
    if checkpoint is not None:
        trainer.restore(checkpoint)
    else:  # a fresh start: rows an earlier attempt logged before it saved anything are not this run's
        trainer.metrics.truncate_after(0)
    examples = len(trainer.train_examples)
    if trainer.max_steps == 0:
        log.info("evaluation only (no training steps): the starting weights are evaluated, no checkpoint is written")
    else:
        log.info(
            "training for %d optimizer steps: %.3g epochs of %d examples at a global batch of %d",
            trainer.max_steps,
            trainer.max_steps * trainer.layout.global_batch / examples,
            examples,
            trainer.layout.global_batch,
        )
    if cfg.trainer.time_budget:
        log.info(
            "or until trainer.time_budget=%g hours of training have passed, whichever comes first",
            cfg.trainer.time_budget,
        )
    final = trainer.fit()
    if runtime.process.is_main:
        log.info("run directory: %s", run_dir)
        if trainer.last_checkpoint is not None:
            log.info("checkpoint: %s", trainer.last_checkpoint)
    return trainer, final


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


def run_command(
    run: Callable[[DictConfig, Path], dict], cfg: DictConfig, writes_run_directory: bool = True
) -> float | None:
    """Run in Hydra's output directory. An expected failure (bad input, impossible config: ``failures.explain``)
    prints one line on stderr, goes to the run's log file too, and makes the command exit with status 1; anything
    else is a bug and keeps its traceback. Returns the final evaluation loss (else the training loss) for Hydra
    sweepers that optimise an objective. ``writes_run_directory=False`` (plm-prepare, whose "run directory" is the
    working directory): no lock file is taken there."""
    failures.task_started()
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    finished = False
    try:
        adopt_submitit_environment()  # a submitit task's rank, before the lock
        # The process that writes a run's checkpoints holds its folder.
        if writes_run_directory and "trainer" in cfg and launched_rank() == 0:
            lock_run_directory(run_dir)
        final = run(cfg, run_dir)
        finished = True
    except Preempted as stopped:
        by_hand = stopped.signum in (signal.SIGINT, signal.SIGHUP)
        how = "rerun the same command to resume" if by_hand else "so that the job is requeued"
        log.warning("%s; exiting with status %d: %s (trainer.resume=auto)", stopped, EXIT_REQUEUE, how)
        sys.exit(EXIT_REQUEUE)
    except Exception as err:
        if not failures.report(err):
            raise
        _log_to_files(f"error: {failures.explain(err)}")
        return None
    finally:
        destroy_process_group(wait_for_peers=finished)
        release(run_dir)
    return final.get("eval_loss", final.get("loss"))


def _log_to_files(message: str) -> None:
    """Write to the log files only (Hydra's <run dir>/<job>.log): the console gets the message on stderr."""
    record = log.makeRecord(log.name, logging.ERROR, __file__, 0, message, None, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)


def main(hydra_main: Callable[[], object]) -> None:
    """The console entry point around a ``@hydra.main`` function: expected failures become one line on stderr."""
    setup()

    def checked() -> None:
        require_launcher_plugin(sys.argv[1:])
        hydra_main()

    failures.guard(checked)
