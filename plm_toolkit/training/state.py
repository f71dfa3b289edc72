"""What a checkpoint of a training run holds beyond its weights, and how it is written and read.

Unsharded runs (one process, DDP) write ``model.safetensors`` / ``objective.safetensors`` from rank 0 and keep the
optimizer state in ``trainer_state.pt``; FSDP runs write module and optimizer shards with
torch.distributed.checkpoint (``training/sharded.py``). Both keep the scheduler, loss scale, RNG, data position,
training time and the objective's carried memories in ``trainer_state.pt``. The loop's own progress travels as a
``TrainingState``; the ``Checkpointer`` reads everything else from the objects it was built with.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core.schema import OptimizerConfig
from plm_toolkit.core.weights import is_sharded, load_weights
from plm_toolkit.training.distributed import all_gather_objects, broadcast_object
from plm_toolkit.training.optim import apply_config
from plm_toolkit.training.precision import LossScaler, Runtime

log = logging.getLogger("plm_toolkit")


@dataclass(frozen=True)
class TrainingState:
    """The loop's progress as trainer_state.pt keeps it."""

    step: int
    samples_seen: int
    # Training time so far (carried across resumes) and the last step's length (training/preemption.py).
    elapsed_seconds: float = 0.0
    step_seconds: float = 0.0
    # The best evaluation so far and early stopping's count (training/selection.py), or None.
    selection: dict | None = None


@dataclass(frozen=True)
class Checkpointer:
    """Writes and reads the checkpoints of a run: the module's weights, the optimizer, schedule, loss scale, RNG and
    the objective's carried memories, beside the ``TrainingState`` it is handed."""

    module: nn.Module  # backbone + objective (PretrainingModule)
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    scaler: LossScaler
    runtime: Runtime
    optimizer_cfg: OptimizerConfig
    run_dir: Path
    config_yaml: str
    tokenizer_json: str | None
    keep_last: int

    def save(self, progress: TrainingState, final: bool) -> Path:
        """Write the checkpoint of step ``progress.step``; returns its path on every rank."""
        process = self.runtime.process
        carried = all_gather_objects(self.module.objective.carried_state(), process)
        state = {
            "step": progress.step,
            "samples_seen": progress.samples_seen,
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "rng": ckpt.rng_state(),
            "world_size": process.world_size,
            "elapsed_seconds": progress.elapsed_seconds,
            "step_seconds": progress.step_seconds,
            # What the objective carries between batches (segment memories), per rank: resuming continues exactly.
            "objective_state": {f"rank{r}.{k}": v for r, part in enumerate(carried) for k, v in part.items()},
            "selection": progress.selection,
        }
        common = (self.config_yaml, self.tokenizer_json, self.keep_last)
        if self.runtime.fsdp:
            # Imported here: torch.distributed.checkpoint adds ~0.7 s to every command's start-up otherwise.
            from plm_toolkit.training.sharded import save_sharded

            return save_sharded(
                self.run_dir, progress.step, self.module, self.optimizer, state, *common, process, final
            )
        path = None
        if process.is_main:
            state["optimizer"] = self.optimizer.state_dict()
            module = self.module
            path = ckpt.save_checkpoint(self.run_dir, progress.step, module.model, module.objective, state, *common)
        return Path(broadcast_object(str(path) if path else None, process))

    def restore(self, checkpoint: ckpt.Checkpoint, max_steps: int) -> TrainingState:
        """Load weights, optimizer, scheduler (over a run of ``max_steps``), loss scale, RNG and carried memories;
        returns the loop's progress."""
        state = checkpoint.trainer_state()
        path = checkpoint.path
        if is_sharded(path):
            from plm_toolkit.training.sharded import load_sharded

            load_sharded(path, self.module, self.optimizer)
        elif self.runtime.fsdp:
            raise ckpt.CheckpointError(
                f"{path}: written by an unsharded run; hardware.distributed=fsdp resumes sharded checkpoints only. "
                "Resume it with the hardware it was written with"
            )
        else:
            load_weights(self.module.model, path / ckpt.MODEL_FILE)
            load_weights(self.module.objective, path / ckpt.OBJECTIVE_FILE)
        try:
            if not is_sharded(path):
                self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])
            self.scaler.load_state_dict(state["scaler"])
            step, samples_seen = int(state["step"]), int(state["samples_seen"])
        except (KeyError, ValueError, RuntimeError) as err:
            raise ckpt.CheckpointError(
                f"{path / ckpt.STATE_FILE}: training state does not fit this run ({err})"
            ) from err
        ckpt.set_rng_state(state["rng"])
        self._apply_config(max_steps, step)
        process = self.runtime.process
        own = f"rank{process.rank}."  # each rank carries the memories of its own rows
        carried = state.get("objective_state", {})
        objective = self.module.objective
        objective.load_carried_state({k.removeprefix(own): v for k, v in carried.items() if k.startswith(own)})
        elapsed, last_step = float(state.get("elapsed_seconds", 0.0)), float(state.get("step_seconds", 0.0))
        return TrainingState(step, samples_seen, elapsed, last_step, state.get("selection"))

    def _apply_config(self, max_steps: int, step: int) -> None:
        """The run's optimizer settings and schedule length over the checkpoint's; says where the decay now ends."""
        before = apply_config(self.optimizer, self.scheduler, self.module, self.optimizer_cfg, max_steps)
        factor = self.scheduler.lr_lambdas[0]
        if before != factor.total_steps and factor.kind in ("linear", "cosine") and self.runtime.process.is_main:
            log.info(
                "learning-rate schedule: its %s decay now ends at step %d, not %d, as if the run had been started "
                "with this length; lr at step %d: %.3g",
                factor.kind,
                factor.total_steps,
                before,
                step + 1,
                self.optimizer.param_groups[0]["lr"],
            )
