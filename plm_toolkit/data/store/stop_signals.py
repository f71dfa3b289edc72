"""Stopping a data preparation on SIGTERM or SIGHUP as Ctrl-C stops it: one line, the finished shards kept.

Killed by the default action of SIGTERM (a scheduler, ``kill``) or SIGHUP (a closed terminal), the preparation's
main process dies at once: its ``finally`` blocks do not run, so the store's lock stays behind, and its worker
processes, still sending their results, print BrokenPipeError tracebacks. Turned into an exception, the signal
unwinds the main process (the pool of workers terminated, the lock removed, a worker's half-written shard
abandoned) and ends as one line with the status a shell gives the signal; the workers leave Ctrl-C and SIGTERM to
the main process, and a SIGTERM from it (the pool's end) unwinds their half-written shard before they exit.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading

_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    """A preparation stopped by a signal; ``failures.interrupted`` prints it and exits with ``status``."""

    def __init__(self, signum: int):
        name = signal.Signals(signum).name
        super().__init__(
            f"stopped by {name}: the token store's finished shards are kept; rerun the same command to resume"
        )
        self.status = 128 + signum


def _raise(signum: int, frame) -> None:
    raise Stopped(signum)


@contextlib.contextmanager
def signals_stop_preparation():
    """While active (in the main thread), SIGTERM and SIGHUP raise ``Stopped``; a signal the process ignores (nohup)
    stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for signum in _SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            previous[signum] = signal.signal(signum, _raise)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _exit_worker(signum: int, frame) -> None:
    sys.exit(0)  # SystemExit: the shard being written is abandoned on the way out, quietly


def quiet_worker_signals() -> None:
    """In a worker process: Ctrl-C is the main process's to handle, SIGTERM (the pool's end) exits cleanly."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _exit_worker)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
