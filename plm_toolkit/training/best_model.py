"""The Trainer's side of keeping the best model and stopping early (the decisions are ``training/selection.py``'s):
save an improving evaluation and point ``checkpoints/best`` at it, stop the loop when patience runs out, and at the
end evaluate the best weights again so the run's results and predictions are the best model's."""

from __future__ import annotations

import logging
from pathlib import Path

from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core.errors import ConfigError
from plm_toolkit.core.weights import load_weights
from plm_toolkit.training.distributed import barrier
from plm_toolkit.training.evaluation import evaluates
from plm_toolkit.training.selection import BEST_LINK, link_best

log = logging.getLogger("plm_toolkit")


class BestModel:
    def __init__(self, trainer):
        self.trainer = trainer
        if trainer.selection is not None and trainer.eval_examples is None:
            # Asked to stop early, a run without evaluations would train its whole length (transformers' Trainer
            # refuses EarlyStoppingCallback without evaluations too); keeping the best model merely keeps the last.
            if trainer.selection.patience and trainer.max_steps:
                raise ConfigError(
                    f"trainer.early_stopping_patience={trainer.selection.patience}: early stopping compares "
                    "evaluations, and this run has no validation data, so it would train its whole length; give "
                    "validation files (data.validation_files; plm-finetune: data.validation_file), or "
                    "trainer.early_stopping_patience=0"
                )
            if trainer.process.is_main and trainer.max_steps:
                log.info("no validation data: the run's model is its last step's (trainer.load_best_model_at_end)")
            trainer.selection = None
        self.selection = trainer.selection
        if self.selection is not None and self.selection.keep_best and trainer.runtime.fsdp:
            raise ConfigError(
                "trainer.load_best_model_at_end=true: not supported with hardware.distributed=fsdp yet; use ddp, "
                "or pick the best checkpoint from metrics.jsonl"
            )
        if self.selection is not None and not evaluates(trainer):
            raise ConfigError(
                "trainer.load_best_model_at_end / trainer.early_stopping_patience: the run never evaluates; give a "
                "validation file and trainer.eval_strategy=epoch or trainer.eval_every=N"
            )

    @property
    def root(self) -> Path:
        return self.trainer.run_dir / "checkpoints"

    def consider(self, record: dict, final: bool = False) -> bool:
        """Offer an evaluation to the selection; save and link it when it is the best so far. True: stop now."""
        selection, trainer = self.selection, self.trainer
        if selection is None or not record:
            return False
        was_stopped = selection.stopped
        try:
            improved = selection.observe(record)
        except ConfigError:  # a metric the evaluation does not report: the steps so far are saved first
            if trainer.saved_step != trainer.step:
                trainer.save(final)
            raise
        if improved and selection.keep_best:
            if trainer.saved_step != trainer.step:
                trainer.save(final)
            if trainer.process.is_main:
                link_best(self.root, trainer.last_checkpoint)
                log.info("best %s so far: %.6g at step %d", selection.metric, selection.best_value, trainer.step)
            barrier(trainer.process)
        if selection.stopped and not was_stopped and trainer.process.is_main:
            log.info(selection.describe_stop())
        return selection.stopped

    def restore(self, state: dict) -> None:
        """A resumed run: the selection as of the checkpoint, and ``best`` pointing at its best step again."""
        if self.selection is None:
            return
        self.selection.load_state_dict(state.get("selection"))
        best = self.selection.best_step
        folder = self.root / f"step_{best}"
        if self.selection.keep_best and best is not None and self.trainer.process.is_main and folder.is_dir():
            link_best(self.root, folder)

    def finish(self) -> dict:
        """After the final save: evaluate the best model's weights again (unless the last step is the best) so
        that eval_results.json, the predictions and the returned record are its. Returns that record, or {}."""
        selection, trainer = self.selection, self.trainer
        if selection is None or not selection.keep_best or selection.best_step is None:
            return {}
        best = self.root / f"step_{selection.best_step}"
        if selection.best_step != trainer.step:
            load_weights(trainer.module.model, best / ckpt.MODEL_FILE)
            load_weights(trainer.module.objective, best / ckpt.OBJECTIVE_FILE)
            # No line of its own (it would carry the last step's number): the line below says whose it is.
            record = {**trainer.evaluate(write=False), "step": selection.best_step}
        else:
            record = {}
        if trainer.process.is_main:
            log.info(
                "the run's model is the best evaluation's: step %d (%s=%.6g), %s -> %s; eval_results.json and the "
                "predictions are its",
                selection.best_step,
                selection.metric,
                selection.best_value,
                self.root / BEST_LINK,
                best.name,
            )
        return {**record, "best_step": selection.best_step, "best_metric": selection.best_value}

    def finish_stopped(self) -> dict:
        """A resumed run that had stopped early: nothing more to train."""
        if self.trainer.process.is_main:
            log.info("already finished: stopped early at step %d; nothing to train", self.selection.last_evaluated)
        return {}
