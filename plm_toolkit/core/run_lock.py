"""One run at a time in a run directory: a lock that plm-train and plm-finetune hold while they use it.

The lock is ``flock`` on ``<run dir>/.lock``, taken by the process that writes the checkpoints (rank 0 under
torchrun). The operating system releases it when that process ends, however it ends (kill -9 included), so a lock
is never stale: the file stays behind, and only a live holder counts. A second run on the same directory stops with
one line naming the directory and the holder (its pid and host, which the holder writes into the file). On a file
system without flock (some network mounts), the run goes on unlocked with a warning.

Default run directories are unique per launch (``plm_launch_tag``): two jobs started in the same second no longer
share one.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import socket
from pathlib import Path

from plm_toolkit.core.errors import ConfigError

log = logging.getLogger("plm_toolkit")

LOCK_FILE = ".lock"
# Directories this process holds, with the open file that holds each lock: taking one again is a no-op.
_held: dict[Path, int] = {}


def lock_run_directory(run_dir: Path) -> None:
    """Hold the lock of ``run_dir`` until :func:`release` or the end of the process; refuse one another process
    holds."""
    run_dir = Path(run_dir).resolve()
    if run_dir in _held:
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise ConfigError(
            f"hydra.run.dir={run_dir}: another run is using this directory ({holder}); wait for it to end, or give "
            "this run another hydra.run.dir"
        ) from None
    except OSError as err:
        os.close(fd)
        if err.errno not in (errno.ENOLCK, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise
        log.warning("%s: this file system does not support locks (%s); the run directory is not locked", path, err)
        return
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
    _held[run_dir] = fd


def live_holder(run_dir: Path) -> str | None:
    """Who holds the lock of ``run_dir`` (``pid 123 on node7``), where another live process does; None where no
    process does (or this one)."""
    run_dir = Path(run_dir).resolve()
    path = run_dir / LOCK_FILE
    if run_dir in _held or not path.is_file():
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
    except OSError:  # a file system without locks: no holder can be told
        return None
    finally:
        os.close(fd)  # releases the shared lock taken here, if any
    return None


def release(run_dir: Path) -> None:
    fd = _held.pop(Path(run_dir).resolve(), None)
    if fd is not None:
        os.close(fd)  # closing the only descriptor of the open file releases the lock


def launch_tag() -> str:
    """What makes a default run directory unique to its launch: this process's id, or under torchrun the launcher's
    (the parent of every rank on the node), so that the ranks of one job share their directory."""
    return str(os.getppid() if "TORCHELASTIC_RUN_ID" in os.environ else os.getpid())
