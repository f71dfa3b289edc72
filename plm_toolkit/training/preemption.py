"""Stopping a run cleanly: on a signal (preemption) or when its wall-clock budget runs out.

SLURM warns a job before its time limit with the signal its ``--signal`` option names (USR1 here) and preempts
with SIGTERM; submitit's own tasks are warned with USR2. On any of them the loop finishes the optimizer step it is
in, writes a checkpoint and stops: the process exits with ``EXIT_REQUEUE`` (75, sysexits' EX_TEMPFAIL, "try
again"), which a batch script turns into ``scontrol requeue``. Where a handler was installed before ours (submitit's,
which requeues the job itself), it runs after the checkpoint instead. ``trainer.resume=auto`` then continues the run
exactly.

A signal is obeyed within ``trainer.signal_grace`` seconds (15 by default, half of SLURM's 30 s between SIGTERM and
SIGKILL) whatever the run is doing. Work that changes nothing yet (reading data, the forward and backward passes of a
step before its optimizer update, compiling them, an evaluation) is *abandonable*: when it is still running that
long after the signal, it is dropped (``StepAbandoned``) and the run saves the last step that completed. Where no step
has completed since the last checkpoint there is nothing to save: the run stops at once. Only an optimizer update and
a checkpoint being written are always finished.

A hang-up (SIGHUP: the terminal or SSH session closed) does the same, unless the command runs under nohup.
Ctrl-C (SIGINT) during training does the same: the step ends, the checkpoint is written, the command exits with
``EXIT_REQUEUE`` and says how to resume. A second Ctrl-C stops at once, without saving (``Interrupted``, exit status
130, one line); under torchrun, whose agent forwards Ctrl-C to the workers as a second SIGINT and kills them after a
grace period, a second SIGINT waits for the checkpoint as SIGTERM does. Once a signal has stopped a run, the handlers
stay installed until the process exits, so the further SIGTERMs SLURM sends cannot kill it (status 143) while it
saves.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

log = logging.getLogger("plm_toolkit")

# Exit status of a run stopped by a signal after writing its checkpoint: "temporary failure, try again".
EXIT_REQUEUE = 75
monotonic: Callable[[], float] = time.monotonic


# Exit status of a run stopped at once by a second Ctrl-C, as a shell reports a process killed by SIGINT.
EXIT_INTERRUPTED = 130


class Preempted(Exception):
    """Raised after the checkpoint of a signalled run is written; the command exits with EXIT_REQUEUE."""

    def __init__(self, signum: int, checkpoint):
        name = signal.Signals(signum).name
        saved = f"the last checkpoint is {checkpoint}" if checkpoint else "no checkpoint was written"
        super().__init__(f"stopped by {name}; {saved}")
        self.signum = signum


class Interrupted(KeyboardInterrupt):
    """A second Ctrl-C: the run stops at once without saving; the command prints its one line and exits 130."""


class StepAbandoned(BaseException):
    """Abandonable work dropped after a signal (``StopSignals``); a BaseException, so that no ``except Exception``
    on the way (torch.compile's own among them) takes it for a failure of that work."""

    def __init__(self, signum: int, work: str, waited: float):
        super().__init__(f"{work} abandoned {waited:.0f} s after {signal.Signals(signum).name}")
        self.signum, self.work, self.waited = signum, work, waited


def saves_after(
    dropped: StepAbandoned, nothing_to_save: bool, distributed: bool, step: int, last_checkpoint: Path | None
) -> bool:
    """Whether the run saves its last completed step ``step`` once ``dropped`` is abandoned: not when nothing
    changed since the last checkpoint, nor where other processes may be inside a collective. Says which."""
    if nothing_to_save:
        since = f"the last checkpoint ({last_checkpoint})" if last_checkpoint else "the start"
        log.warning("%s: no step has completed since %s, so there is nothing to save; stopping now", dropped, since)
        return False
    if distributed:
        log.warning(
            "%s: not saving step %d, since the other processes may be inside a collective; the last checkpoint is %s",
            dropped,
            step,
            last_checkpoint or "none",
        )
        return False
    log.warning("%s: saving step %d, the last one that completed", dropped, step)
    return True


# Seconds between a re-check of a signalled run that is finishing work it may not drop (an update, a save).
RECHECK_SECONDS = 0.5


class StopSignals:
    """While active, SIGTERM, SIGINT and SIGUSR1 (and SIGUSR2 where submitit handles it) only set ``received``; a
    second SIGINT raises ``Interrupted`` (outside torchrun). Leaving the block by an exception once a signal came
    ignores all but SIGINT from then on.

    The loop marks its abandonable work with ``abandonable(what)``. A signal that comes during it, or while it
    starts within ``grace`` seconds of the signal, drops it with ``StepAbandoned``: at once where
    ``nothing_to_save()`` says no step completed since the last checkpoint, else once ``grace`` seconds have passed
    (SIGALRM, so that the main thread is interrupted wherever it is)."""

    def __init__(self, grace: float = 15.0, nothing_to_save: Callable[[], bool] = lambda: False) -> None:
        self.received: int | None = None
        self.received_at: float | None = None
        self.previous: dict[int, object] = {}
        self.pid = os.getpid()
        self.grace, self.nothing_to_save = float(grace), nothing_to_save
        self.work: str | None = None  # the abandonable work in progress, or None
        # torchrun's agent sends the workers a SIGINT of its own after the terminal's: not a second Ctrl-C.
        self.second_interrupt_stops = "TORCHELASTIC_RUN_ID" not in os.environ

    def _signals(self) -> list[int]:
        wanted = [signal.SIGTERM, signal.SIGINT, signal.SIGUSR1]
        if callable(signal.getsignal(signal.SIGUSR2)):  # submitit's preemption handler
            wanted.append(signal.SIGUSR2)
        # A closed terminal or SSH session (SIGHUP) saves as SIGTERM does; under nohup (ignored) it stays ignored.
        if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
            wanted.append(signal.SIGHUP)
        return wanted

    @property
    def active(self) -> bool:
        return bool(self.previous)

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in self._signals():
                self.previous[signum] = signal.signal(signum, self._handle)
            self.previous[signal.SIGALRM] = signal.signal(signal.SIGALRM, self._deadline)
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if self.active:
            signal.setitimer(signal.ITIMER_REAL, 0)
        if kind is not None and self.received is not None:
            # The process is on its way out (with the requeue status): further signals must not kill it. Ignored at
            # the system's level, since Python puts back the default handlers of its own ones as it shuts down.
            for signum in self.previous:
                if signum not in (signal.SIGINT, signal.SIGALRM):  # a second Ctrl-C still stops at once
                    signal.signal(signum, signal.SIG_IGN)
            return
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        self.previous = {}

    @contextlib.contextmanager
    def abandonable(self, work: str) -> Iterator[None]:
        """Mark ``work`` as droppable: it changes no state that a checkpoint would hold."""
        self.work = work
        try:
            if self.received is not None:
                self._drop_if_due()
            yield
        finally:
            self.work = None

    def _waited(self) -> float:
        return monotonic() - self.received_at if self.received_at is not None else 0.0

    def _due(self) -> bool:
        return self.nothing_to_save() or self._waited() >= self.grace

    def _drop_if_due(self) -> None:
        """Raise StepAbandoned when the work in progress may be dropped now. ``work`` stays set until the exception
        leaves ``abandonable``: a handler can run inside a finalizer or a weakref callback, where Python prints and
        swallows what it raises, and the next SIGALRM must then raise again."""
        if self.work is not None and self.received is not None and self._due():
            raise StepAbandoned(self.received, self.work, self._waited())

    def _handle(self, signum: int, frame) -> None:
        if os.getpid() != self.pid:  # a data-loader worker forked inside the block: the training process decides
            return
        name = signal.Signals(signum).name
        if self.received is None:
            again = " (Ctrl-C again stops at once, without saving)" if signum == signal.SIGINT else ""
            log.warning(
                "received %s: finishing this step (at most %g s), then saving a checkpoint%s", name, self.grace, again
            )
            self.received, self.received_at = signum, monotonic()
            # Work dropped inside a compiled backward makes autograd print the forward's traceback: not news.
            warnings.filterwarnings("ignore", message="Error detected in", category=UserWarning)
            if self.active:  # re-checked soon where the work may already be dropped (a raise can be swallowed)
                signal.setitimer(signal.ITIMER_REAL, RECHECK_SECONDS if self._due() else max(self.grace, 0.01))
            self._drop_if_due()
        elif signum == signal.SIGINT and self.second_interrupt_stops:
            again = "again" if self.received == signal.SIGINT else f"after {signal.Signals(self.received).name}"
            raise Interrupted(
                f"interrupted {again} (Ctrl-C): stopped at once; a checkpoint being written is not kept: rerun the "
                "command to resume from the newest complete one (trainer.resume=auto)"
            )

    def _deadline(self, signum: int, frame) -> None:
        """SIGALRM, ``grace`` seconds after the signal: drop abandonable work, or check again shortly."""
        if os.getpid() != self.pid or self.received is None:
            return
        signal.setitimer(signal.ITIMER_REAL, RECHECK_SECONDS)  # first: the raise below may be swallowed
        self._drop_if_due()

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

    def restart(self, elapsed: float, last_step: float | None = None) -> None:
        """Count on from ``elapsed`` seconds; ``last_step``: the length of the step before (from a checkpoint)."""
        self.elapsed, self._last = elapsed, monotonic()
        if last_step is not None:
            self._last_step = last_step

    def tick(self) -> None:
        """Account the time since the previous tick (one optimizer step, with its logging and saving)."""
        now = monotonic()
        self._last_step = now - self._last
        self.elapsed += self._last_step
        self._last = now

    @property
    def step_seconds(self) -> float:
        """The length of the last step, saved with a checkpoint so that a resumed budget run knows whether one more
        step fits."""
        return self._last_step

    def fraction(self) -> float:
        """Share of the budget used, in [0, 1] (0 without a budget)."""
        return min(self.elapsed / self.budget, 1.0) if self.budget else 0.0

    def next_step_overruns(self) -> bool:
        """Whether one more step of the last one's length would end past the budget."""
        return self.budget is not None and self.elapsed + self._last_step > self.budget
