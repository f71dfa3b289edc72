"""Where training metrics go: metrics.jsonl (one JSON object per record), TensorBoard scalars, a tqdm bar."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

from tqdm.auto import tqdm

log = logging.getLogger("plm_toolkit")


class MetricsWriter:
    """Appends records to ``metrics.jsonl`` and mirrors numeric values to TensorBoard (rank 0 only)."""

    def __init__(self, run_dir: Path, tensorboard: bool, enabled: bool = True):
        self.enabled = enabled
        self.path = run_dir / "metrics.jsonl"
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
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        if self.tb is not None:
            step = record["step"]
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)) and math.isfinite(value):
                    self.tb.add_scalar(key, value, step)

    def truncate_after(self, step: int) -> None:
        """On resume, drop records past the checkpoint so the file reads as one uninterrupted run."""
        if not (self.enabled and self.path.exists()):
            return
        kept = [line for line in self.path.read_text().splitlines() if line and json.loads(line)["step"] <= step]
        self.path.write_text("".join(line + "\n" for line in kept))

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


class ProgressBar:
    """Steps done of the run with tqdm's rate and ETA, and the epoch (of ``epochs`` when the run counts in them)."""

    def __init__(self, total: int, initial: int, epochs: float | None, enabled: bool):
        self.bar = tqdm(total=total, initial=initial, disable=not enabled, dynamic_ncols=True, desc="train steps")
        self.epochs = epochs

    def update(self, n: int = 1) -> None:
        self.bar.update(n)

    def show(self, record: dict, budget_used: float | None = None) -> None:
        """``budget_used``: the share of trainer.time_budget spent, shown where a budget rather than the step count
        (the bar's total) ends the run."""
        epoch = f"{record['epoch']:.2f}" + (f"/{self.epochs:g}" if self.epochs else "")
        extra = {"mfu": f"{record['mfu']:.1%}"} if "mfu" in record else {}
        if budget_used is not None:
            extra["budget"] = f"{budget_used:.0%}"
        self.bar.set_postfix(
            epoch=epoch,
            loss=f"{record['loss']:.4f}",
            lr=f"{record['lr']:.2e}",
            tok_s=f"{record['tokens_per_s']:.0f}",
            **extra,
        )

    def write(self, text: str) -> None:
        self.bar.write(text)

    def close(self) -> None:
        self.bar.close()
