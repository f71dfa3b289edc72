"""What the commands that train share (plm-train, plm-finetune, plm-glue): the run directory held and the process
group joined around the run, its first steps (validation, device, the checkpoint to resume), and the loop's set-up."""

from __future__ import annotations

import logging
import random
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from plm_toolkit.config.checks import evaluation_only
from plm_toolkit.config.resolve import ResolvedRun
from plm_toolkit.config.validate import validate
from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core.errors import DataError
from plm_toolkit.core.launch import adopt_submitit_environment, launched_rank, launched_world_size
from plm_toolkit.core.run_lock import lock_run_directory, release
from plm_toolkit.training.distributed import destroy_process_group, init_process_group
from plm_toolkit.training.loop import Trainer
from plm_toolkit.training.precision import Runtime, resolve_runtime
from plm_toolkit.training.preemption import EXIT_REQUEUE, Preempted
from plm_toolkit.training.resume import starting_checkpoint
from plm_toolkit.training.trackers import close_trackers, start_trackers

log = logging.getLogger("plm_toolkit")


def in_run_directory(run: Callable[[DictConfig, Path], dict]) -> Callable[[DictConfig, Path], dict]:
    """``run`` holding its run directory (rank 0 of a launch takes the lock: the process that writes checkpoints),
    leaving the process group when it ends, and exiting with the requeue status when a signal stopped it."""

    def held(cfg: DictConfig, run_dir: Path) -> dict:
        finished = False
        try:
            adopt_submitit_environment()  # a submitit task's rank, before the lock
            if "trainer" in cfg and launched_rank() == 0:
                lock_run_directory(run_dir)
            final = run(cfg, run_dir)
            finished = True
            return final
        except Preempted as stopped:
            by_hand = stopped.signum in (signal.SIGINT, signal.SIGHUP)
            how = "rerun the same command to resume" if by_hand else "so that the job is requeued"
            log.warning("%s; exiting with status %d: %s (trainer.resume=auto)", stopped, EXIT_REQUEUE, how)
            sys.exit(EXIT_REQUEUE)
        finally:
            close_trackers(run_dir)
            destroy_process_group(wait_for_peers=finished)
            release(run_dir)

    return held


def start_run(cfg: DictConfig, run_dir: Path) -> tuple[Runtime, ckpt.Checkpoint | None, ResolvedRun | None]:
    """Validate, choose the device and precision, join the process group under torchrun, clear half-written
    checkpoints and find the one ``trainer.resume`` names, refusing one whose config changed what is trained
    (``training/resume.py``): the first steps of every run, before any data work. Returns a plm-train config's run
    as validation resolved it (``config/resolve.py``; None for plm-finetune's)."""
    resolved = validate(cfg)
    adopt_submitit_environment()
    runtime = resolve_runtime(cfg.hardware)
    if launched_world_size() > 1 or runtime.fsdp:
        runtime = resolve_runtime(cfg.hardware, init_process_group(runtime.backend))
    if runtime.process.is_main:
        ckpt.clean_temporary(run_dir)
    checkpoint = starting_checkpoint(cfg, run_dir, runtime.process.is_main)
    # MLflow / W&B (trainer.loggers): one that cannot start stops the command here, before any data work.
    start_trackers(cfg.trainer, run_dir, OmegaConf.to_container(cfg, resolve=True), runtime.process.is_main)
    return runtime, checkpoint, resolved


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def training_length(trainer: Trainer) -> str:
    """The log line that says how long the run trains: steps, epochs of the examples, global batch; with
    trainer.phases, each phase's steps, sequence length, batch and epochs of its own examples."""
    if not trainer.phases:
        examples, batch = len(trainer.train_examples), trainer.layout.global_batch
        epochs = trainer.max_steps * batch / examples
        return (
            f"training for {trainer.max_steps} optimizer steps: {epochs:.3g} epochs of {examples} examples at a "
            f"global batch of {batch}"
        )
    accumulation = trainer.layout.grad_accum_steps * trainer.layout.world_size
    parts = []
    for number, phase in enumerate(trainer.phases, start=1):
        batch = phase.batch_size * accumulation
        epochs = (phase.end - phase.start) * batch / len(phase.data.train)
        parts.append(
            f"phase {number}, steps {phase.start + 1}-{phase.end}: {phase.max_seq_len} tokens, a global batch of "
            f"{batch}, {epochs:.3g} epochs of its {len(phase.data.train)} examples"
        )
    return f"training for {trainer.max_steps} optimizer steps in {len(parts)} phases (trainer.phases): " + "; ".join(
        parts
    )


def run_training(
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
        longest=cfg.data.get("max_seq_len"),
        data_keys=("data.train_files", "data.validation_files")
        if "train_files" in cfg.data
        else ("data.train_file", "data.validation_file"),
    )
    if checkpoint is not None:
        trainer.restore(checkpoint)
    else:  # a fresh start: rows an earlier attempt logged before it saved anything are not this run's
        trainer.metrics.truncate_after(0)
    if trainer.max_steps == 0:
        log.info("evaluation only (no training steps): the starting weights are evaluated, no checkpoint is written")
    else:
        log.info(training_length(trainer))
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
