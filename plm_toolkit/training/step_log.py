"""What each training log line says of the steps since the one before: their losses and metrics (read back from the
device only here, training/window.py), throughput, gradient norm, training time, compilation and MFU, as one
record written to metrics.jsonl and the trackers and shown on the progress bar."""

from __future__ import annotations

import math
import time
from pathlib import Path

from plm_toolkit.core.errors import TrainingError
from plm_toolkit.training.compilation import CompileWatch
from plm_toolkit.training.distributed import ProcessInfo
from plm_toolkit.training.logging import MetricsWriter
from plm_toolkit.training.preemption import TrainingClock
from plm_toolkit.training.progress import ProgressBar
from plm_toolkit.training.window import StepStats, Window, settle


class StepLog:
    """The steps since the last log line, and the record each line writes of them."""

    def __init__(
        self,
        metrics: MetricsWriter,
        process: ProcessInfo,
        denominators: dict[str, str],
        clock: TrainingClock,
        watch: CompileWatch,
        peak: float | None,
    ):
        self.metrics, self.process, self.denominators = metrics, process, denominators
        self.clock, self.watch, self.peak = clock, watch, peak  # peak: the device's TFLOP/s (None: unknown)
        # Steps not read back from the device yet, and the sums of those read since the last line.
        self.pending: list[StepStats] = []
        self.window = Window.empty()
        self.started = time.perf_counter()
        # Graphs compiled when the last line was written (a window that compiled is no pace for the ETA).
        self.graphs_logged = 0

    def add(self, stats: StepStats) -> None:
        self.pending.append(stats)

    def settle(self, last_checkpoint: Path | None, scaled: bool) -> None:
        """Read the pending steps back from the device into the window. A non-finite loss stops the run, naming
        ``last_checkpoint``, unless the loss is ``scaled`` (fp16: the scaler skips that step)."""
        window, losses = settle(self.pending, self.process)
        self.pending = []
        bad = next(((step, loss) for step, loss in losses if not math.isfinite(loss)), None)
        if bad is not None and not scaled:
            raise TrainingError(
                f"loss is {bad[1]} at step {bad[0]}; the last good checkpoint is "
                f"{last_checkpoint or 'none (no checkpoint written yet)'}. Lower optimizer.lr, raise "
                "optimizer.warmup_steps, or check the data"
            )
        self.window.add(window)

    def restart_timer(self) -> None:
        """Count the throughput from now: the time of an evaluation or a save stays out of it."""
        self.started = time.perf_counter()

    def line(self, step: int, lr: float, position: dict, blend: dict, bar: ProgressBar) -> dict:
        """The record of the settled window at ``step`` (``position``: its epoch and phase; ``blend``: the shares of
        a blend's sources), written and shown; a new window starts."""
        window, elapsed = self.window, time.perf_counter() - self.started
        record = {
            "step": step,
            **window.summary(self.denominators),
            "lr": lr,
            "tokens_per_s": window.tokens / elapsed,
            "step_s": elapsed / max(window.steps, 1),
            "grad_norm": window.grad_norm / max(window.steps, 1),
            "elapsed_s": round(self.clock.elapsed, 3),
            **position,
            **self.watch.record(),
            **blend,
        }
        if self.peak:
            record["mfu"] = window.flops / elapsed / (self.peak * 1e12 * self.process.world_size)
        self.metrics.write(record)
        # The first step warms up (allocations, data workers) and a step that compiled is no pace for the ETA.
        bar.show(record, steady=step > 1 and self.watch.graphs == self.graphs_logged)
        self.graphs_logged = self.watch.graphs
        self.window, self.started = Window.empty(), time.perf_counter()
        return record
