"""Where training metrics go: metrics.jsonl (one JSON object per record), TensorBoard scalars, a tqdm bar."""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tqdm.auto import tqdm

from plm_toolkit.core.atomic import write_text
from plm_toolkit.training.trackers import Trackers

log = logging.getLogger("plm_toolkit")

METRICS_FILE = "metrics.jsonl"


def read_metrics(path: Path) -> list[dict]:
    """The records of a metrics.jsonl. A line that is not a JSON object (the torn last line of a run killed in the
    middle of an append) is dropped with a warning naming the file and the line, instead of stopping every reader."""
    records = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            log.warning("%s:%d: not a complete metrics record (a write cut short?); dropped", path, number)
            continue
        records.append(record)
    return records


class MetricsWriter:
    """Appends records to ``metrics.jsonl`` and mirrors numeric values to TensorBoard and the started trackers
    (``training/trackers.py``: MLflow, W&B), rank 0 only."""

    def __init__(
        self,
        run_dir: Path,
        tensorboard: bool,
        enabled: bool = True,
        jsonl: bool = True,
        trackers: Trackers | None = None,
    ):
        self.enabled = enabled
        self.jsonl = jsonl
        self.trackers = trackers if trackers is not None else Trackers([])
        self.path = run_dir / METRICS_FILE
        if enabled:
            run_dir.mkdir(parents=True, exist_ok=True)
        self.tb = None
        if enabled and tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # tensorboard is a dependency, but a trimmed environment may lack it
                log.warning("tensorboard is not installed; writing metrics.jsonl only")
            else:
                self.tb = SummaryWriter(log_dir=str(run_dir / "tensorboard"))

    def write(self, record: dict) -> None:
        if not self.enabled:
            return
        if self.jsonl:
            with self.path.open("a") as f:
                f.write(json.dumps(record) + "\n")
        self.trackers.log(record)
        if self.tb is not None:
            step = record["step"]
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)) and math.isfinite(value):
                    self.tb.add_scalar(key, value, step)

    def truncate_after(self, step: int) -> None:
        """On resume, drop records past the checkpoint (on a fresh start, step 0: all of them) so the file reads as
        one uninterrupted run; a torn line goes too."""
        if not (self.enabled and self.path.exists()):
            return
        kept = [record for record in read_metrics(self.path) if record["step"] <= step]
        write_text(self.path, "".join(json.dumps(record) + "\n" for record in kept))

    def has_evaluation(self, step: int) -> bool:
        """Whether the file holds an evaluation record of ``step``."""
        if not self.path.exists():
            return False
        return any(r["step"] == step and any(k.startswith("eval_") for k in r) for r in read_metrics(self.path))

    def close(self) -> None:
        self.trackers.close()
        if self.tb is not None:
            self.tb.close()


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
