"""Files and folders written whole or not at all: checkpoints, plm-export's folders, plm-average's, and every file a
command or the data cache writes (``atomic_file``, ``write_text``).

A folder is written under a temporary name beside its final place (``.tmp-<name>-<pid>``: the same file system, so
the rename is atomic), its files are synced to disk, and only then is it renamed into place. A failure or an
interruption (an exception, Ctrl-C, SIGTERM turned into SystemExit) removes the temporary folder and leaves the final
place as it was; a process killed outright leaves its temporary folder, which the next write to the same place
removes once that process is gone.

    with atomic_folder(out) as tmp:      # out: absent, empty, or a folder this writer may replace
        write_everything_into(tmp)

A file is written the same way, under ``.<name>.<pid>.tmp`` beside it: processes writing the same file (the ranks of
a data-parallel run filling one cache) never share a temporary name, and a reader never sees half a file.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from plm_toolkit.core.errors import WriteError

TMP_PREFIX = ".tmp-"


def fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_folder(folder: Path) -> None:
    """Flush every file under ``folder`` to disk, then the folder itself (its entries)."""
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            fsync(path)
    fsync(folder)


def swap_in(tmp: Path, final: Path, aside: Path) -> None:
    """Put the written folder ``tmp`` at ``final``: one rename when ``final`` is absent or an empty folder; otherwise
    the old ``final`` is renamed to ``aside``, ``tmp`` renamed in, and the old one removed. Should the second rename
    fail, the old folder goes back."""
    if not final.is_dir() or not any(final.iterdir()):
        os.rename(tmp, final)  # POSIX rename replaces an empty directory
    else:
        os.rename(final, aside)
        try:
            os.rename(tmp, final)
        except BaseException:
            os.rename(aside, final)
            raise
        shutil.rmtree(aside, ignore_errors=True)
    fsync(final.parent)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale(final: Path) -> None:
    """Remove the temporary folders that writers of ``final`` killed outright left beside it (their process gone)."""
    if not final.parent.is_dir():
        return
    for kind in ("", "old-"):
        prefix = f"{TMP_PREFIX}{kind}{final.name}-"
        for path in final.parent.iterdir():
            pid = path.name.removeprefix(prefix)
            if path.name.startswith(prefix) and pid.isdigit() and not _alive(int(pid)):
                shutil.rmtree(path, ignore_errors=True)


@contextmanager
def atomic_folder(final: str | Path) -> Iterator[Path]:
    """A fresh temporary folder beside ``final`` to write into. When the block ends normally, it is synced and
    replaces ``final`` (``swap_in``: whatever ``final`` held is removed, so check first that it may be); when the
    block raises, it is removed and ``final`` is untouched."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(final)
    tmp = final.with_name(f"{TMP_PREFIX}{final.name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        sync_folder(tmp)
        swap_in(tmp, final, final.with_name(f"{TMP_PREFIX}old-{final.name}-{os.getpid()}"))
    except BaseException as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise_no_room(err, final, written=True)
        raise


def raise_no_room(err: BaseException, final: Path, written: bool) -> None:
    """WriteError naming the output ``final`` (and the file, where known) when ``err`` is a write that found no room;
    the temporary path, the only one the error may hold, is gone by then. Returns otherwise."""
    room = no_room(err)
    if room is None:
        return
    file = f" writing {Path(room.filename).name}" if room.filename and written else ""
    raise WriteError(
        f"{final}: could not be written ({room.strerror}{file}); the partial copy is removed and {final} is as it "
        "was: free space on its file system (or raise the quota or file-size limit) and run the command again"
    ) from None


# Write failures for want of room: a full disk, a quota, a file-size limit (RLIMIT_FSIZE).
NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def no_room(err: BaseException) -> OSError | None:
    """The OSError of a write that found no room: Python's own, or one a Rust library (safetensors, tokenizers) gave
    as text ("No space left on device (os error 28)")."""
    if isinstance(err, OSError):
        return err if err.errno in NO_ROOM else None
    code = re.search(r"os error (\d+)", str(err))
    if code is not None and int(code.group(1)) in NO_ROOM:
        return OSError(int(code.group(1)), os.strerror(int(code.group(1))))
    return None


def save_safetensors(tensors: dict, path: str | Path, metadata: dict[str, str] | None = None) -> None:
    """``safetensors.torch.save_file``, then the permissions any other new file gets (0666 less the umask):
    safetensors 0.8 creates its files 0600, which left checkpoints and exports unreadable to the rest of a team on a
    shared cluster. A failed write (a full disk, a file-size limit) is an OSError naming ``path`` and the cause."""
    from safetensors import SafetensorError
    from safetensors.torch import save_file

    try:
        save_file(tensors, str(path), metadata=metadata)
    except SafetensorError as err:
        # safetensors reports the system's error inside its own text: "I/O error: File too large (os error 27)".
        code = re.search(r"os error (\d+)", str(err))
        if code is None:
            raise
        raise OSError(int(code.group(1)), os.strerror(int(code.group(1))), str(path)) from err
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)


@contextmanager
def atomic_file(final: str | Path, sync: bool = False) -> Iterator[Path]:
    """A temporary path beside ``final`` to write into; when the block ends normally it is renamed to ``final`` in one
    step (``sync``: flushed to disk first, and the folder's entry after), when it raises it is removed and ``final``
    is untouched (a write that found no room: WriteError naming ``final``)."""
    final = Path(final)
    tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        if sync:
            fsync(tmp)
        os.replace(tmp, final)
        if sync:
            fsync(final.parent)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        raise_no_room(err, final, written=False)
        raise
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: str | Path, text: str, sync: bool = False) -> None:
    """Write ``text`` to ``path`` whole or not at all (``atomic_file``), as UTF-8."""
    with atomic_file(path, sync) as tmp:
        tmp.write_text(text, encoding="utf-8")


class _WriteRecorder:
    """A binary file that keeps the OSError of a failed write: torch.save turns it into a RuntimeError without the
    cause ("unexpected pos 704 vs 598")."""

    def __init__(self, file):
        self.file, self.error = file, None

    def write(self, data) -> int:
        try:
            return self.file.write(data)
        except OSError as err:
            self.error = err
            raise

    def flush(self) -> None:
        try:
            self.file.flush()
        except OSError as err:
            self.error = err
            raise


def save_torch(value, path: str | Path) -> None:
    """``torch.save(value, path)``; a failed write (a full disk, a file-size limit) is an OSError naming ``path`` and
    the cause."""
    import torch

    try:
        with open(path, "wb") as file:
            recorder = _WriteRecorder(file)
            try:
                torch.save(value, recorder)
            except RuntimeError:
                if recorder.error is None:
                    raise
                raise recorder.error from None
    except OSError as err:
        raise OSError(err.errno, err.strerror, str(path)) from None
