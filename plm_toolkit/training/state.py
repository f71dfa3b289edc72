"""What a checkpoint of a training run holds beyond its weights, and how the Trainer writes and reads it.

Unsharded runs (one process, DDP) write ``model.safetensors`` / ``objective.safetensors`` from rank 0 and keep the
optimizer state in ``trainer_state.pt``; FSDP runs write module and optimizer shards with
torch.distributed.checkpoint (``training/sharded.py``). Both keep the scheduler, loss scale, RNG, data position,
training time and the objective's carried memories in ``trainer_state.pt``.
"""

from __future__ import annotations

import logging
from pathlib import Path

from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core.weights import is_sharded, load_weights
from plm_toolkit.training.distributed import all_gather_objects, broadcast_object
from plm_toolkit.training.optim import apply_config

log = logging.getLogger("plm_toolkit")


def save_state(trainer, final: bool) -> Path:
    """Write the trainer's checkpoint at its current step; returns its path on every rank."""
    process = trainer.process
    carried = all_gather_objects(trainer.objective.carried_state(), process)
    state = {
        "step": trainer.step,
        "samples_seen": trainer.samples_seen,
        "scheduler": trainer.scheduler.state_dict(),
        "scaler": trainer.scaler.state_dict(),
        "rng": ckpt.rng_state(),
        "world_size": process.world_size,
        "elapsed_seconds": trainer.clock.elapsed,
        "step_seconds": trainer.clock.step_seconds,
        # What the objective carries between batches (segment memories), per rank: resuming continues exactly.
        "objective_state": {f"rank{r}.{k}": v for r, part in enumerate(carried) for k, v in part.items()},
        # The best evaluation so far and early stopping's count (training/selection.py), or None.
        "selection": trainer.selection.state_dict() if trainer.selection is not None else None,
    }
    common = (trainer.config_yaml, trainer.tokenizer_json, trainer.cfg.keep_last)
    if trainer.runtime.fsdp:
        # Imported here: torch.distributed.checkpoint adds ~0.7 s to every command's start-up otherwise.
        from plm_toolkit.training.sharded import save_sharded

        return save_sharded(
            trainer.run_dir, trainer.step, trainer.module, trainer.optimizer, state, *common, process, final
        )
    path = None
    if process.is_main:
        state["optimizer"] = trainer.optimizer.state_dict()
        module = trainer.module
        path = ckpt.save_checkpoint(trainer.run_dir, trainer.step, module.model, module.objective, state, *common)
    return Path(broadcast_object(str(path) if path else None, process))


def restore_state(trainer, checkpoint: ckpt.Checkpoint) -> dict:
    """Load weights, optimizer, scheduler, loss scale, RNG and carried memories; returns the training state."""
    state = checkpoint.trainer_state()
    path = checkpoint.path
    if is_sharded(path):
        from plm_toolkit.training.sharded import load_sharded

        load_sharded(path, trainer.module, trainer.optimizer)
    elif trainer.runtime.fsdp:
        raise ckpt.CheckpointError(
            f"{path}: written by an unsharded run; hardware.distributed=fsdp resumes sharded checkpoints only. "
            "Resume it with the hardware it was written with"
        )
    else:
        load_weights(trainer.module.model, path / ckpt.MODEL_FILE)
        load_weights(trainer.module.objective, path / ckpt.OBJECTIVE_FILE)
    try:
        if not is_sharded(path):
            trainer.optimizer.load_state_dict(state["optimizer"])
        trainer.scheduler.load_state_dict(state["scheduler"])
        trainer.scaler.load_state_dict(state["scaler"])
        int(state["step"]), int(state["samples_seen"])
    except (KeyError, ValueError, RuntimeError) as err:
        raise ckpt.CheckpointError(f"{path / ckpt.STATE_FILE}: training state does not fit this run ({err})") from err
    ckpt.set_rng_state(state["rng"])
    before = apply_config(
        trainer.optimizer, trainer.scheduler, trainer.module, trainer.optimizer_cfg, trainer.max_steps
    )
    factor = trainer.scheduler.lr_lambdas[0]
    if before != factor.total_steps and factor.kind in ("linear", "cosine") and trainer.process.is_main:
        log.info(
            "learning-rate schedule: its %s decay now ends at step %d, not %d, as if the run had been started with "
            "this length; lr at step %d: %.3g",
            factor.kind,
            factor.total_steps,
            before,
            int(state["step"]) + 1,
            trainer.optimizer.param_groups[0]["lr"],
        )
    own = f"rank{trainer.process.rank}."  # each rank carries the memories of its own rows
    carried = state.get("objective_state", {})
    trainer.objective.load_carried_state({k.removeprefix(own): v for k, v in carried.items() if k.startswith(own)})
    return state
