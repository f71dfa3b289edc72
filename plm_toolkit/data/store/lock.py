"""Doing a piece of work once among many processes that share a file system (data-parallel ranks on one or many
nodes): the first to create the lock file does it, the others wait for it, polling, without entering any collective
whose timeout the work could outlast.

The holder writes its host, process id and what it does into the lock and touches it every few seconds (a
heartbeat thread), so a waiter knows whom it waits for and for what, and can tell a holder that died (its lock
stops changing, or its process is gone on this host) from one that is slow: it then takes the lock over and does
the work itself. How long a waiter waits is therefore as long as the work takes, as long as the holder lives.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 5.0
# A lock whose holder has not touched it for this long is taken over (the holder died without removing it).
STALE_SECONDS = 120.0
POLL_SECONDS = 0.5
REPORT_SECONDS = 30.0


def run_once(lock: Path, done: Callable[[], bool], work: Callable[[], None], what: str) -> None:
    """Run ``work`` unless ``done()``, in one process at a time: every caller returns once ``done()`` holds (after
    doing the work itself, or waiting while another process does it)."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    waited_since, reported = time.monotonic(), 0.0
    while not done():
        try:
            descriptor = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _holder(lock)
            if holder is None:  # removed between our attempts: try again at once
                continue
            if _dead(holder):
                # A holder gone from this host died (a kill): routine; one silent past STALE_SECONDS is worth a word.
                level = logging.WARNING if holder["age"] > STALE_SECONDS else logging.DEBUG
                log.log(level, "taking over %s: %s", what, _describe(holder))
                lock.unlink(missing_ok=True)
                continue
            now = time.monotonic()
            if now - reported >= REPORT_SECONDS:
                log.info("waiting %.0f s for %s (%s)", now - waited_since, what, _describe(holder))
                reported = now
            time.sleep(POLL_SECONDS)
            continue
        with os.fdopen(descriptor, "w") as f:
            json.dump({"host": socket.gethostname(), "pid": os.getpid(), "what": what, "since": time.time()}, f)
        beat = _Heartbeat(lock)
        try:
            if not done():
                work()
        finally:
            beat.stop()
            lock.unlink(missing_ok=True)
        return


def written_once(folder: Path, build: Callable[[Path], None], what: str) -> Path:
    """``folder``, built by ``build(temporary folder)`` unless it exists, once among processes sharing it."""

    def work() -> None:
        temporary = folder.with_name(f".{folder.name}.{os.getpid()}.tmp")
        shutil.rmtree(temporary, ignore_errors=True)
        temporary.mkdir(parents=True)
        build(temporary)
        os.replace(temporary, folder)

    run_once(folder.with_name(f".{folder.name}.lock"), folder.is_dir, work, what)
    return folder


def _holder(lock: Path) -> dict | None:
    try:
        text = lock.read_text(encoding="utf-8")
        age = time.time() - lock.stat().st_mtime
    except FileNotFoundError:
        return None
    try:
        holder = json.loads(text)
    except ValueError:  # being written: treat as fresh
        holder = {}
    return {**holder, "age": age}


def _dead(holder: dict) -> bool:
    if holder["age"] > STALE_SECONDS:
        return True
    if holder.get("host") == socket.gethostname() and holder.get("pid"):
        try:
            os.kill(int(holder["pid"]), 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
    return False


def _describe(holder: dict) -> str:
    since = time.time() - holder.get("since", time.time())
    return (
        f"process {holder.get('pid', '?')} on {holder.get('host', '?')} started {since:.0f} s ago, "
        f"last heard from {holder['age']:.0f} s ago"
    )


class _Heartbeat:
    """Touches the lock file every HEARTBEAT_SECONDS until stopped."""

    def __init__(self, lock: Path):
        self.lock, self.stopped = lock, threading.Event()
        self.thread = threading.Thread(target=self._run, name="plm-lock-heartbeat", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped.wait(HEARTBEAT_SECONDS):
            try:
                os.utime(self.lock)
            except FileNotFoundError:
                return

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join()
