"""Stopping a run cleanly: on a signal (preemption) or when its wall-clock budget runs out.

SLURM warns a job before its time limit with the signal its ``--signal`` option names (USR1 here) and preempts
with SIGTERM; submitit's own tasks are warned with USR2. On any of them the loop finishes the optimizer step it is
in, writes a checkpoint and stops: the process exits with ``EXIT_REQUEUE`` (75, sysexits' EX_TEMPFAIL, "try
again"), which a batch script turns into ``scontrol requeue``. Where a handler was installed before ours (submitit's,
which requeues the job itself), it runs after the checkpoint instead. ``trainer.resume=auto`` then continues the run
exactly.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable

log = logging.getLogger("plm_toolkit")

# Exit status of a run stopped by a signal after writing its checkpoint: "temporary failure, try again".
EXIT_REQUEUE = 75
monotonic: Callable[[], float] = time.monotonic


class Preempted(Exception):
    """Raised after the checkpoint of a signalled run is written; the command exits with EXIT_REQUEUE."""

    def __init__(self, signum: int, checkpoint):
        super().__init__(f"stopped by {signal.Signals(signum).name} after saving {checkpoint}")
        self.signum = signum


class StopSignals:
    """While active, SIGTERM and SIGUSR1 (and SIGUSR2 where submitit handles it) only set ``received``."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.previous: dict[int, object] = {}

    def _signals(self) -> list[int]:
        wanted = [signal.SIGTERM, signal.SIGUSR1]
        if callable(signal.getsignal(signal.SIGUSR2)):  # submitit's preemption handler
            wanted.append(signal.SIGUSR2)
        return wanted

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in self._signals():
                self.previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        self.previous = {}

    def _handle(self, signum: int, frame) -> None:
        if self.received is None:
            log.warning("received %s: finishing this step, then saving a checkpoint", signal.Signals(signum).name)
        self.received = signum

    def hand_over(self) -> None:
        """Run the handler that owned the received signal before us (submitit's requeue), if it was Python's."""
        handler = self.previous.get(self.received) if self.received is not None else None
        if callable(handler) and handler not in (signal.default_int_handler,):
            handler(self.received, None)


class TrainingClock:
    """Wall-clock seconds of training (carried across resumes) against ``trainer.time_budget`` hours."""

    def __init__(self, budget_hours: float | None, elapsed: float = 0.0):
        self.budget = None if budget_hours is None else float(budget_hours) * 3600.0
        self.elapsed = elapsed
        self._last = monotonic()
        self._last_step = 0.0

    @property
    def budgeted(self) -> bool:
        return self.budget is not None

    def restart(self, elapsed: float) -> None:
        self.elapsed, self._last = elapsed, monotonic()

    def tick(self) -> None:
        """Account the time since the previous tick (one optimizer step, with its logging and saving)."""
        now = monotonic()
        self._last_step = now - self._last
        self.elapsed += self._last_step
        self._last = now

    def fraction(self) -> float:
        """Share of the budget used, in [0, 1] (0 without a budget)."""
        return min(self.elapsed / self.budget, 1.0) if self.budget else 0.0

    def next_step_overruns(self) -> bool:
        """Whether one more step of the last one's length would end past the budget."""
        return self.budget is not None and self.elapsed + self._last_step > self.budget
