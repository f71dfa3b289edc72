"""A checkpoint read from a run that is still training: what a failure to read it really means.

A training run saves each checkpoint whole (a temporary folder renamed into place) and removes all but its newest
``trainer.keep_last``, so a reader of one of its steps (``plm-finetune model.checkpoint=run/checkpoints/step_300``
while the run goes on) can find that step half removed, or gone, in the middle of reading it. The reader's error then
names a file of the checkpoint (a missing ``model.safetensors``, no checkpoint there), which blames the checkpoint
for what its run is doing. ``live_run_line`` turns such an error into the line that says so: a path in the message
lies in a run directory whose lock (``core/run_lock.py``) a live process holds, and the step it names is gone or
incomplete (or the run has saved no step yet).
"""

from __future__ import annotations

import re
from pathlib import Path

from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core.run_lock import LOCK_FILE, live_holder

STEP = re.compile(r"step_\d+")


def named_paths(text: str) -> list[Path]:
    """The paths a message names (any word with a slash, after a ``key=``), in order."""
    words = (word.strip("'\"(),;:.[]") for word in text.split())
    return [Path(word.rsplit("=", 1)[-1]).expanduser() for word in words if "/" in word]


def run_directory(path: Path) -> tuple[Path, Path | None] | None:
    """The run directory ``path`` lies in (one with a run lock and checkpoints/), and the step folder it names."""
    step = None
    for folder in (path, *path.parents):
        if STEP.fullmatch(folder.name) and folder.parent.name == "checkpoints":
            step = folder
        if (folder / LOCK_FILE).is_file() and (folder / "checkpoints").is_dir():
            return folder, step
    return None


def complete(step: Path) -> bool:
    return (step / ckpt.MODEL_FILE).is_file() and (step / ckpt.CONFIG_FILE).is_file()


def live_run_line(message: str) -> str | None:
    """The line for a failure to read a checkpoint of a run that is still training, or None where ``message``
    names no such checkpoint."""
    for path in named_paths(message):
        found = run_directory(path)
        if found is None:
            continue
        run_dir, step = found
        holder = live_holder(run_dir)
        if holder is None:
            continue
        if step is not None and not complete(step):
            return (
                f"{step}: removed while it was read: the run {run_dir} is still training ({holder}) and removes all "
                "but its newest checkpoints as it saves (trainer.keep_last); read one it keeps (its newest step, or "
                "checkpoints/best where it keeps its best model), copy the checkpoint first, or wait for the run to end"
            )
        if step is None and not any(complete(s) for s in (run_dir / "checkpoints").glob("step_*")):
            return (
                f"{path}: the run {run_dir} is still training ({holder}) and has saved no checkpoint yet; wait for "
                "its first save (trainer.save_every) or for the run to end"
            )
    return None
