"""Keeping the best model and stopping early, as the loop sees it (the decisions are ``training/selection.py``'s):
judge each evaluation, point ``checkpoints/best`` at the checkpoint of an improving one (the Trainer saves it), say
when patience runs out, and at the end evaluate the best weights again so the run's results and predictions are
the best model's."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core.errors import ConfigError
from plm_toolkit.core.weights import load_weights
from plm_toolkit.training.distributed import ProcessInfo, barrier
from plm_toolkit.training.evaluation import Evaluator
from plm_toolkit.training.selection import BEST_LINK, Selection, link_best

log = logging.getLogger("plm_toolkit")


@dataclass(frozen=True)
class Verdict:
    """What one evaluation decided."""

    # The best so far, and trainer.load_best_model_at_end keeps it: its step is saved and linked as the best.
    keep: bool = False
    # Early stopping (trainer.early_stopping_patience): the run stops now.
    stop: bool = False
    # This evaluation is the one that ran out of patience.
    stopped_now: bool = False


class BestModel:
    """The run's selection (None: it neither keeps its best model nor stops early), checked against the run."""

    def __init__(
        self,
        selection: Selection | None,
        root: Path,
        process: ProcessInfo,
        *,
        has_validation: bool,
        evaluates: bool,
        trains: bool,
        fsdp: bool,
    ):
        self.root, self.process = root, process  # root: the run's checkpoints folder
        if selection is not None and not has_validation:
            # Asked to stop early, a run without evaluations would train its whole length (transformers' Trainer
            # refuses EarlyStoppingCallback without evaluations too); keeping the best model merely keeps the last.
            if selection.patience and trains:
                raise ConfigError(
                    f"trainer.early_stopping_patience={selection.patience}: early stopping compares "
                    "evaluations, and this run has no validation data, so it would train its whole length; give "
                    "validation files (data.validation_files; plm-finetune: data.validation_file), or "
                    "trainer.early_stopping_patience=0"
                )
            if process.is_main and trains:
                log.info("no validation data: the run's model is its last step's (trainer.load_best_model_at_end)")
            selection = None
        self.selection = selection
        if selection is not None and selection.keep_best and fsdp:
            raise ConfigError(
                "trainer.load_best_model_at_end=true: not supported with hardware.distributed=fsdp yet; use ddp, "
                "or pick the best checkpoint from metrics.jsonl"
            )
        if selection is not None and not evaluates:
            raise ConfigError(
                "trainer.load_best_model_at_end / trainer.early_stopping_patience: the run never evaluates; give a "
                "validation file and trainer.eval_strategy=epoch or trainer.eval_every=N"
            )

    @property
    def stopped(self) -> bool:
        """Whether early stopping stopped the run (a resumed one too)."""
        return self.selection is not None and self.selection.stopped

    def judge(self, record: dict) -> Verdict:
        """Offer an evaluation's record to the selection (a metric it does not report raises ConfigError)."""
        selection = self.selection
        if selection is None or not record:
            return Verdict()
        was_stopped = selection.stopped
        improved = selection.observe(record)
        return Verdict(improved and selection.keep_best, selection.stopped, selection.stopped and not was_stopped)

    def settle(self, verdict: Verdict, checkpoint: Path | None, step: int) -> None:
        """After the Trainer saved a kept step: point ``best`` at its ``checkpoint``; say when early stopping
        stops the run."""
        selection = self.selection
        if verdict.keep:
            if self.process.is_main:
                link_best(self.root, checkpoint)
                log.info("best %s so far: %.6g at step %d", selection.metric, selection.best_value, step)
            barrier(self.process)
        if verdict.stopped_now and self.process.is_main:
            log.info(selection.describe_stop())

    def state_dict(self) -> dict | None:
        return self.selection.state_dict() if self.selection is not None else None

    def restore(self, state: dict | None) -> None:
        """A resumed run: the selection as of the checkpoint (``state``), and ``best`` pointing at its best step
        again."""
        if self.selection is None:
            return
        self.selection.load_state_dict(state)
        best = self.selection.best_step
        folder = self.root / f"step_{best}"
        if self.selection.keep_best and best is not None and self.process.is_main and folder.is_dir():
            link_best(self.root, folder)

    def finish(self, step: int, module: nn.Module, evaluator: Evaluator, validation) -> dict:
        """After the final save of step ``step``: load the best model's weights into ``module`` and evaluate them
        on ``validation`` again (unless the last step is the best), so that eval_results.json, the predictions and
        the returned record are its. Returns that record, or {}."""
        selection = self.selection
        if selection is None or not selection.keep_best or selection.best_step is None:
            return {}
        best = self.root / f"step_{selection.best_step}"
        if selection.best_step != step:
            load_weights(module.model, best / ckpt.MODEL_FILE)
            load_weights(module.objective, best / ckpt.OBJECTIVE_FILE)
            # No line of its own (it would carry the last step's number): the line below says whose it is.
            record = {**evaluator.evaluate(validation, step), "step": selection.best_step}
        else:
            record = {}
        if self.process.is_main:
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
        if self.process.is_main:
            log.info("already finished: stopped early at step %d; nothing to train", self.selection.last_evaluated)
        return {}
