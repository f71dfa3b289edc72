"""Worker processes for data preparation: spawned (not forked from a process that holds torch, tokenizers' threads
and open files), each starting with only what it needs, one tokenizer thread each (the processes are the
parallelism)."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys

CONTEXT = multiprocessing.get_context("spawn")


def available_cores() -> int:
    """The CPU cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@contextlib.contextmanager
def worker_pool(processes: int, initializer=None, initargs: tuple = ()):
    """A pool of ``processes`` spawned workers, closed and joined on leaving (terminated first on a failure)."""
    saved = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # inherited by the workers as they start
    try:
        with _main_hidden():  # the workers start here
            pool = CONTEXT.Pool(processes, _start_worker, (initializer, initargs))
    finally:
        if saved is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = saved
    # A pool left normally is closed, so that every worker reads its end-of-work sentinel and exits. Pool.__exit__
    # (terminate) is kept for a failure: it holds the task queue's lock and relies on SIGTERM to end the workers, and
    # a worker still waiting for that lock at that moment was seen never to end, hanging the preparation.
    try:
        yield pool
    except BaseException:
        pool.terminate()
        raise
    else:
        pool.close()
    finally:
        pool.join()


def _start_worker(initializer, initargs: tuple) -> None:
    """A worker's start: signals left to the main process (``data/store/stop_signals.py``), then ``initializer``."""
    from plm_toolkit.data.store.stop_signals import quiet_worker_signals

    quiet_worker_signals()
    if initializer is not None:
        initializer(*initargs)


@contextlib.contextmanager
def _main_hidden():
    """Spawned workers start without importing this program's main module: multiprocessing runs it again in every
    child (plm-train's or plm-prepare's: torch, hydra, every family) unless it has neither a spec nor a file. The
    workers import the functions they run by name."""
    main = sys.modules["__main__"]
    hidden = {key: main.__dict__[key] for key in ("__spec__", "__file__") if key in main.__dict__}
    main.__spec__ = None
    main.__dict__.pop("__file__", None)
    try:
        yield
    finally:
        main.__dict__.update(hidden)
