"""Keeping a run's best model and stopping early, as transformers' Trainer does (``load_best_model_at_end``,
``metric_for_best_model``, ``greater_is_better``, and its EarlyStoppingCallback's patience and threshold).

Every evaluation is offered to ``Selection.observe``. An improvement is saved as a checkpoint and
``checkpoints/best`` points to it (pruning keeps it); ``trainer.early_stopping_patience`` evaluations in a row
without an improvement larger than ``trainer.early_stopping_threshold`` stop the run. The selection's state travels
in every checkpoint's trainer_state.pt, so a resumed run chooses and stops where the uninterrupted one would.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from plm_toolkit.core.atomic import TMP_PREFIX, fsync
from plm_toolkit.core.errors import ConfigError

log = logging.getLogger("plm_toolkit")

# checkpoints/<BEST_LINK>: a symlink to the best evaluation's step_N folder.
BEST_LINK = "best"
# Metric names (their endings) where lower is better.
LOWER_IS_BETTER = ("loss", "perplexity")


def default_metric(objective) -> str:
    """The metric a run keeps its best model by when trainer.metric_for_best_model is empty: the task's main metric
    (``main_metric`` on the task class, else its first of task.metrics), else the evaluation loss."""
    named = getattr(objective, "main_metric", None)
    if named:
        return named
    metrics = getattr(getattr(objective, "config", None), "metrics", None)
    return str(metrics[0]) if metrics else "loss"


@dataclass
class Selection:
    # The evaluation record's key (eval_ prefixed) and its direction.
    metric: str
    greater_is_better: bool
    patience: int
    threshold: float
    keep_best: bool
    # What the evaluations so far decided.
    best_step: int | None = None
    best_value: float | None = None
    bad_evaluations: int = 0
    stopped: bool = False
    last_evaluated: int = -1

    @classmethod
    def from_config(cls, trainer_cfg, objective) -> Selection | None:
        """The run's selection, or None when it neither keeps its best model nor stops early."""
        keep = bool(trainer_cfg.get("load_best_model_at_end", False))
        patience = int(trainer_cfg.get("early_stopping_patience", 0) or 0)
        if not keep and not patience:
            return None
        name = trainer_cfg.get("metric_for_best_model") or default_metric(objective)
        key = name if name.startswith("eval_") else f"eval_{name}"
        greater = trainer_cfg.get("greater_is_better")
        if greater is None:
            greater = not key.endswith(LOWER_IS_BETTER)
        threshold = float(trainer_cfg.get("early_stopping_threshold", 0.0))
        return cls(key, bool(greater), patience, threshold, keep)

    def observe(self, record: dict) -> bool:
        """Take an evaluation's record into account; True when it is the best so far."""
        if self.metric not in record:
            reported = ", ".join(k for k in record if k.startswith("eval_")) or "nothing"
            raise ConfigError(
                f"trainer.metric_for_best_model={self.metric.removeprefix('eval_')}: the evaluation reports no "
                f"{self.metric}; it reports {reported}"
            )
        value, step = float(record[self.metric]), int(record["step"])
        self.last_evaluated = step
        sign = 1.0 if self.greater_is_better else -1.0
        gain = math.inf if self.best_value is None else sign * (value - self.best_value)
        improved = math.isfinite(value) and gain > 0
        if improved:
            self.best_step, self.best_value = step, value
        if improved and gain > self.threshold:
            self.bad_evaluations = 0
        else:
            self.bad_evaluations += 1
            if self.patience and self.bad_evaluations >= self.patience:
                self.stopped = True
        return improved

    def describe_stop(self) -> str:
        return (
            f"early stopping at step {self.last_evaluated}: {self.metric} has not improved by more than "
            f"{self.threshold:g} in {self.bad_evaluations} evaluations (trainer.early_stopping_patience="
            f"{self.patience}); the best is {self.best_value:.6g} at step {self.best_step}"
        )

    def state_dict(self) -> dict:
        return asdict(self)

    def load_state_dict(self, state: dict | None) -> None:
        """Restore what a checkpoint's evaluations decided (a checkpoint written without selection: nothing yet)."""
        state = state or {}
        for key in ("best_step", "best_value", "bad_evaluations", "stopped", "last_evaluated"):
            if key in state:
                setattr(self, key, state[key])


def link_best(root: Path, checkpoint: Path) -> None:
    """Point ``root/best`` at ``checkpoint`` (a step_N folder in ``root``) in one rename."""
    tmp = root / f"{TMP_PREFIX}{BEST_LINK}-{os.getpid()}"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    os.symlink(checkpoint.name, tmp)
    os.replace(tmp, root / BEST_LINK)
    fsync(root)
