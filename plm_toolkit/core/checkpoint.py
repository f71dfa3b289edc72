"""Checkpoints: one directory per save, written atomically.

Layout of ``<run dir>/checkpoints/step_N/``:
  model.safetensors      backbone weights (what fine-tuning loads)
  objective.safetensors  objective parameters (LM/NSP heads, ELECTRA's generator, ...)
  config.yaml            the resolved run config
  tokenizer.json         the tokenizer the run used
  sharded/               instead of the two weight files in a sharded (FSDP) run: model, objective and optimizer
                         state written by every rank with torch.distributed.checkpoint (training/sharded.py)
  trainer_state.pt       optimizer, scheduler, loss scaler, RNG states, data position (tensors and plain
                         Python values only, read back with ``torch.load(weights_only=True)``); written last, so
                         its presence marks a complete checkpoint
``checkpoints/last`` is a symlink to the newest one. Files go to a temporary directory that is renamed into place,
so a crash at any moment leaves the previous checkpoints intact. The weight files themselves are core/weights.py's.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from plm_toolkit.core.atomic import TMP_PREFIX, fsync, save_torch, swap_in, sync_folder
from plm_toolkit.core.errors import CheckpointError
from plm_toolkit.core.weights import is_sharded, save_weights, torch_reason

MODEL_FILE = "model.safetensors"
OBJECTIVE_FILE = "objective.safetensors"
CONFIG_FILE = "config.yaml"
TOKENIZER_FILE = "tokenizer.json"
STATE_FILE = "trainer_state.pt"


def rng_state() -> dict:
    state = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
    }
    _, keys, pos, has_gauss, gauss = np.random.get_state()
    state["numpy"] = {"keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos), "gauss": (has_gauss, gauss)}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(_tuplify(state["python"]))
    np_state = state["numpy"]
    keys = np_state["keys"].numpy().astype(np.uint32)
    np.random.set_state(("MT19937", keys, np_state["pos"], *np_state["gauss"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _tuplify(x):
    return tuple(_tuplify(v) for v in x) if isinstance(x, (list, tuple)) else x


@dataclass
class Checkpoint:
    path: Path

    def step(self) -> int:
        """The optimizer step it was saved at, read from the training state: a copied or renamed folder keeps it."""
        return int(self.trainer_state()["step"])

    def trainer_state(self, mmap: bool = False) -> dict:
        """The training state; ``mmap``: its tensors mapped, not read (to look at its plain values only)."""
        try:
            return torch.load(self.path / STATE_FILE, map_location="cpu", weights_only=True, mmap=mmap)
        except Exception as err:  # corrupt, truncated or holding pickled objects
            reason = torch_reason(err)
            raise CheckpointError(f"{self.path / STATE_FILE}: not a readable training state ({reason})") from None


def is_complete(path: Path) -> bool:
    return (path / STATE_FILE).is_file() and ((path / MODEL_FILE).is_file() or is_sharded(path))


def temporary_directory(root: Path, step: int, tag: int | None = None) -> Path:
    """A fresh ``.tmp-step_N-<tag>`` directory under ``root`` to write a checkpoint into before ``publish``."""
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f"{TMP_PREFIX}step_{step}-{os.getpid() if tag is None else tag}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    return tmp


def write_common_files(tmp: Path, trainer_state: dict, config_yaml: str, tokenizer_json: str | None) -> None:
    """The files every checkpoint has beside its weights; the training state last, as the mark of completeness."""
    (tmp / CONFIG_FILE).write_text(config_yaml)
    if tokenizer_json is not None:
        (tmp / TOKENIZER_FILE).write_text(tokenizer_json)
    save_torch(trainer_state, tmp / STATE_FILE)


def publish(root: Path, tmp: Path, step: int, keep_last: int) -> Path:
    """Make the written ``tmp`` the checkpoint ``step_<step>`` in one rename, point ``last`` at it, prune."""
    sync_folder(tmp)
    final = root / f"step_{step}"
    # The same step saved again (e.g. a rerun) replaces the old copy.
    swap_in(tmp, final, root / f"{TMP_PREFIX}old-step_{step}-{os.getpid()}")
    link_tmp = root / f"{TMP_PREFIX}last-{os.getpid()}"
    if link_tmp.is_symlink() or link_tmp.exists():
        link_tmp.unlink()
    os.symlink(final.name, link_tmp)
    os.replace(link_tmp, root / "last")
    fsync(root)
    prune(root, keep_last)
    return final


def save_checkpoint(
    run_dir: Path,
    step: int,
    model: nn.Module,
    objective: nn.Module,
    trainer_state: dict,
    config_yaml: str,
    tokenizer_json: str | None,
    keep_last: int,
) -> Path:
    """Write ``checkpoints/step_<step>`` atomically, point ``last`` at it and prune old ones."""
    root = run_dir / "checkpoints"
    with failed_save(root, step) as tmp:
        save_weights(model, tmp / MODEL_FILE)
        save_weights(objective, tmp / OBJECTIVE_FILE)
        write_common_files(tmp, trainer_state, config_yaml, tokenizer_json)
        return publish(root, tmp, step, keep_last)


@contextmanager
def failed_save(root: Path, step: int, tag: int | None = None) -> Iterator[Path]:
    """The temporary folder of checkpoint ``step`` (``temporary_directory``). A write that fails in the block (a full
    disk, a file-size limit) removes it and stops the run with one line naming the folder and the cause; ``last``
    still points to the previous checkpoint, which nothing touched."""
    try:
        tmp = temporary_directory(root, step, tag)
    except OSError as err:
        raise _save_error(root, step, err) from None
    try:
        yield tmp
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise _save_error(root, step, err) from None


def _save_error(root: Path, step: int, err: OSError) -> CheckpointError:
    where = f" writing {Path(err.filename).name}" if err.filename else ""
    last = root / "last"
    kept = f"{last} still points to {os.readlink(last)}" if last.is_symlink() else "no earlier checkpoint exists"
    return CheckpointError(
        f"{root}: could not save checkpoint step_{step} ({err.strerror or err}{where}); the half-written copy is "
        f"removed and {kept}: free space (or raise the file-size limit) and rerun the command to resume"
    )


def list_checkpoints(root: Path) -> list[Path]:
    """Complete step_N checkpoints under ``root``, oldest first."""
    if not root.is_dir():
        return []
    found = [p for p in root.glob("step_*") if p.is_dir() and p.name[5:].isdigit() and is_complete(p)]
    return sorted(found, key=lambda p: int(p.name[5:]))


def last_checkpoint(path: Path) -> Path | None:
    """The one rule for "the last checkpoint" of a run directory, its ``checkpoints`` folder or its ``last`` link:
    the newest complete step_N there (what trainer.resume=auto resumes), whatever ``last`` links to; a ``last``
    that points elsewhere (an older step, another run) is named in a warning. None where ``path`` holds no steps."""
    path = Path(path)
    roots = (path.parent,) if path.name == "last" else (path / "checkpoints", path)
    found = next((steps for steps in map(list_checkpoints, roots) if steps), None)
    if not found:
        return None
    newest = found[-1].resolve()
    link = found[-1].parent / "last"
    if link.is_symlink() and link.resolve() != newest:
        logging.getLogger("plm_toolkit").warning(
            "%s points to %s, not to the run's newest complete checkpoint: using %s", link, os.readlink(link), newest
        )
    return newest


def plm_checkpoint_dir(path: Path) -> Path | None:
    """The step directory a plm-train path names (a step_N folder, or a run directory: its ``best``, the model a run
    that keeps its best model ends with, else its last checkpoint: ``last_checkpoint`` of the run directory, its
    checkpoints folder or ``last``), or None."""
    weights = path / MODEL_FILE
    if os.path.lexists(weights) and not weights.is_file():  # a link to a device, a folder: name it, not the folder
        what = f"a link to {os.readlink(weights)}" if weights.is_symlink() else "a folder, device, FIFO or socket"
        raise CheckpointError(f"{weights}: not a regular file ({what}); expected the checkpoint's safetensors weights")
    if path.name != "last" and (path / MODEL_FILE).is_file() and (path / CONFIG_FILE).is_file():
        return path.resolve()
    for best in (path / "best", path / "checkpoints" / "best"):
        if (best / MODEL_FILE).is_file() and (best / CONFIG_FILE).is_file():
            return best.resolve()
    last = last_checkpoint(path)
    if last is not None and (last / MODEL_FILE).is_file() and (last / CONFIG_FILE).is_file():
        return last
    for candidate in (path, path / "last", path / "checkpoints" / "last"):
        if (candidate / MODEL_FILE).is_file() and (candidate / CONFIG_FILE).is_file():
            return candidate.resolve()
    found = list_checkpoints(path / "checkpoints") or list_checkpoints(path)
    return found[-1] if found else None


def prune(root: Path, keep_last: int) -> None:
    if keep_last <= 0:
        return
    # What ``last`` and ``best`` (trainer.load_best_model_at_end) point to stays.
    kept = {(root / name).resolve() for name in ("last", "best") if (root / name).exists()}
    for old in list_checkpoints(root)[:-keep_last]:
        if old.resolve() not in kept:
            shutil.rmtree(old, ignore_errors=True)


def clean_temporary(run_dir: Path) -> None:
    """Remove half-written checkpoints a crash left behind (never a complete one)."""
    root = run_dir / "checkpoints"
    if root.is_dir():
        for p in root.glob(f"{TMP_PREFIX}*"):
            if p.is_symlink():
                p.unlink()
            else:
                shutil.rmtree(p, ignore_errors=True)


def refuse_inside_checkpoints(out: Path) -> None:
    """Refuse to write ``out`` inside a run's ``checkpoints/`` folder (``checkpoints/last/hf`` included): the run's
    next save prunes old steps (trainer.keep_last) and would delete it with them."""
    resolved = Path(out).expanduser().resolve()
    for folder in (resolved, *resolved.parents):
        if folder.name == "checkpoints" and list_checkpoints(folder):
            raise CheckpointError(
                f"{out}: inside the run's checkpoints folder {folder}, whose old steps each save prunes "
                f"(trainer.keep_last), deleting what else they hold; give a folder outside it, such as "
                f"{folder.parent / resolved.name}"
            )


def find_checkpoint(resume: str, run_dir: Path) -> Checkpoint | None:
    """The checkpoint ``trainer.resume`` asks for: none, auto (newest in the run directory or None), or a path."""
    if resume in ("none", "", "null"):
        return None
    if resume == "auto":
        last = last_checkpoint(run_dir / "checkpoints")
        return Checkpoint(last) if last is not None else None
    path = Path(resume).expanduser()
    if path.name != "last" and path.is_dir() and is_complete(path):
        return Checkpoint(path.resolve())
    last = last_checkpoint(path)
    if last is not None:
        return Checkpoint(last)
    for candidate in (path, path / "last", path / "checkpoints" / "last"):
        if candidate.is_dir() and is_complete(candidate):
            return Checkpoint(candidate.resolve())
    for root in (path, path / "checkpoints"):
        found = list_checkpoints(root)
        if found:
            return Checkpoint(found[-1])
    raise CheckpointError(
        f"trainer.resume={resume}: no checkpoint there (expected a folder with {MODEL_FILE} and {STATE_FILE}, "
        "or a run directory with checkpoints/)"
    )
