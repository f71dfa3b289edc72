"""What the console and the run's log file show while a run trains: a tqdm bar of the steps with its rate and ETA,
and one line per logged step or evaluation. The metrics themselves go to ``training/logging.py``'s writer."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable

from tqdm.auto import tqdm

log = logging.getLogger("plm_toolkit")


def clock(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class ProgressBar:
    """Steps done of the run with tqdm's rate and ETA, and the epoch (of ``epochs`` when the run counts in them).

    Under a time budget (``budget_used``: the share of trainer.time_budget spent) the bar counts that share or the
    share of the steps done, whichever is further along, in thousandths: its percentage and ETA are then those of
    whichever ends the run first, not of a trainer.max_steps the budget never lets it reach.

    Every logged step is also one line (``progress_line``: step, loss, lr, tokens/s, MFU, ETA) in the run's log
    (<run dir>/<command>.log) and, where no bar is drawn (``enabled`` false, or stderr not a terminal: a log file,
    a pipe, a batch job), on the console; ``lines`` is false on the processes that do not log (ranks above 0)."""

    SCALE = 1000

    def __init__(
        self,
        total: int,
        initial: int,
        epochs: float | None,
        enabled: bool,
        budget_used: Callable[[], float] | None = None,
        lines: bool = True,
    ):
        self.total, self.step, self.budget_used = total, initial, budget_used
        self.lines = lines
        self.started, self.first_step = time.perf_counter(), initial
        # Seconds per step of the last logged window that compiled nothing: the ETA's pace (None before one).
        self.step_seconds: float | None = None
        enabled = enabled and lines and sys.stderr.isatty()
        if budget_used is None:
            self.bar = tqdm(total=total, initial=initial, disable=not enabled, dynamic_ncols=True, desc="train steps")
        else:
            self.bar = tqdm(
                total=self.SCALE,
                initial=self._share(),
                disable=not enabled,
                dynamic_ncols=True,
                desc="train (time budget)",
                bar_format="{desc}: {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}{postfix}]",
            )
        self.epochs = epochs

    def _share(self) -> int:
        share = max(self.step / max(self.total, 1), self.budget_used())
        return min(round(share * self.SCALE), self.SCALE)

    def update(self, n: int = 1) -> None:
        self.step += n
        self.bar.update(n if self.budget_used is None else self._share() - self.bar.n)

    def show(self, record: dict, steady: bool = True) -> None:
        """A logged step's record; ``steady``: its window compiled nothing, so its pace predicts the rest."""
        if steady and record.get("step_s"):
            self.step_seconds = record["step_s"]
        epoch = f"{record['epoch']:.2f}" + (f"/{self.epochs:g}" if self.epochs else "")
        if "phase" in record:
            epoch = f"{epoch} of phase {record['phase']}"
        line = self.progress_line(record, epoch)
        if self.bar.disable:
            if self.lines:
                log.info(line)
            return
        _to_log_files(line)
        extra = {"mfu": f"{record['mfu']:.1%}"} if "mfu" in record else {}
        if self.budget_used is not None:
            extra = {"step": str(record["step"]), "budget": f"{self.budget_used():.0%}", **extra}
        self.bar.set_postfix(
            epoch=epoch,
            loss=f"{record['loss']:.4f}",
            lr=f"{record['lr']:.2e}",
            tok_s=f"{record['tokens_per_s']:.0f}",
            **extra,
        )

    def eta(self) -> float | None:
        """Seconds left: the steps left at the pace of the last steady window; under a time budget, the budget
        left if that ends the run first. None before a steady window (the first steps compile and warm up)."""
        if self.step_seconds is None:
            return None
        left = self.step_seconds * (self.total - self.step)
        if self.budget_used is not None:
            elapsed = time.perf_counter() - self.started
            share = max(self.step / max(self.total, 1), self.budget_used())
            gained = share - self.first_step / max(self.total, 1)
            if gained > 0:
                left = min(left, elapsed / gained * (1 - share))
        return left

    def progress_line(self, record: dict, epoch: str) -> str:
        """``step 30/300 (10%) epoch 0.30/3 loss 5.1234 lr 1.00e-04 1520 tok/s elapsed 0:00:41 eta 0:06:09``."""
        elapsed = time.perf_counter() - self.started
        share = self.step / max(self.total, 1)
        if self.budget_used is not None:
            share = max(share, self.budget_used())
        mfu = f" mfu {record['mfu']:.1%}" if "mfu" in record else ""
        left = self.eta()
        eta = f" eta {clock(left)}" if left is not None else ""
        return (
            f"step {record['step']}/{self.total} ({share:.0%}) epoch {epoch} loss {record['loss']:.4f} "
            f"lr {record['lr']:.2e} {record['tokens_per_s']:.0f} tok/s{mfu} elapsed {clock(elapsed)}{eta}"
        )

    def write(self, text: str) -> None:
        """An evaluation's line: on the console and in the run's log file (<run dir>/<command>.log)."""
        if self.bar.disable:
            if self.lines:
                log.info(text)
            return
        self.bar.write(text)  # above the bar on the console; the log file gets it below
        _to_log_files(text)

    def close(self) -> None:
        self.bar.close()


def _to_log_files(text: str) -> None:
    """``text`` in the run's log file only (the console shows the bar)."""
    record = log.makeRecord(log.name, logging.INFO, __file__, 0, text, None, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)
