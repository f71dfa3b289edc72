"""plm-average: average the weights of a run's last N checkpoints into one checkpoint.

    plm-average runs/wmt-base 5 runs/wmt-base/averaged        # the paper's base models: the last 5
    plm-generate checkpoint=runs/wmt-base/averaged ...         # or model.checkpoint=... for plm-finetune

Vaswani et al. (2017, section 6.1): "For the base models, we used a single model obtained by averaging the last 5
checkpoints, which were written at 10-minute intervals. For the big models, we averaged the last 20." Keep that
many checkpoints while training (``trainer.keep_last`` >= N, ``trainer.save_every`` sets the interval).

Every floating-point tensor of ``model.safetensors`` and ``objective.safetensors`` is the mean over the N
checkpoints, taken in float64 and stored in the original dtype; other tensors (integer buffers) come from the newest.
The output folder holds the averaged weights and the newest checkpoint's ``config.yaml`` and ``tokenizer.json``,
plus ``averaged.json`` naming the averaged steps; it has no training state, so it is a model to use, not a run to
resume. Written to a temporary folder and renamed into place.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
from pathlib import Path

import torch

from plm_toolkit.commands import failures
from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core.atomic import atomic_folder, save_safetensors
from plm_toolkit.core.errors import CheckpointError
from plm_toolkit.core.weights import read_weights

log = logging.getLogger("plm_toolkit")


def last_checkpoints(run_dir: Path, count: int) -> list[Path]:
    """The newest ``count`` complete checkpoints of a run directory (or of its checkpoints/ folder), oldest first."""
    if count < 1:
        raise CheckpointError(f"N={count}: average at least 1 checkpoint")
    found = ckpt.list_checkpoints(run_dir / "checkpoints") or ckpt.list_checkpoints(run_dir)
    if not found:
        raise CheckpointError(f"{run_dir}: no checkpoints (expected a run directory with checkpoints/step_N/)")
    if len(found) < count:
        raise CheckpointError(
            f"{run_dir}: asked to average {count} checkpoints but it has {len(found)} "
            f"({', '.join(p.name for p in found)}); train with trainer.keep_last >= {count}"
        )
    return found[-count:]


def average_weights(files: list[Path]) -> dict[str, torch.Tensor]:
    """Mean of every floating-point tensor over the files (float64 sum), the newest file's other tensors."""
    states = [read_weights(f) for f in files]
    newest = states[-1]
    for f, state in zip(files, states, strict=True):
        if state.keys() != newest.keys():
            odd = sorted(state.keys() ^ newest.keys())[:5]
            raise CheckpointError(f"{f}: its tensors differ from {files[-1]}'s ({', '.join(odd)}); same run?")
        wrong = [k for k, v in state.items() if v.shape != newest[k].shape]
        if wrong:
            raise CheckpointError(f"{f}: shapes of {', '.join(wrong[:5])} differ from {files[-1]}'s; same run?")
    out = {}
    for key, last in newest.items():
        if last.is_floating_point():
            total = sum(state[key].double() for state in states)
            out[key] = (total / len(states)).to(last.dtype).contiguous()
        else:
            out[key] = last
    return out


def check_agreement(chosen: list[Path]) -> None:
    """CheckpointError naming the first checkpoint whose files (the weights, the objective's heads) or tokenizer
    differ from the newest's: their average would silently lack the heads, or mix ids of two vocabularies."""
    newest = chosen[-1]
    for checkpoint in chosen[:-1]:
        for name in (ckpt.MODEL_FILE, ckpt.OBJECTIVE_FILE, ckpt.TOKENIZER_FILE):
            here, there = (checkpoint / name).is_file(), (newest / name).is_file()
            if here != there:
                has, lacks = (checkpoint, newest) if here else (newest, checkpoint)
                raise CheckpointError(
                    f"{lacks}: has no {name}, which {has} has; the checkpoints to average must hold the same files"
                )
        tokenizer = checkpoint / ckpt.TOKENIZER_FILE
        if tokenizer.is_file() and tokenizer.read_bytes() != (newest / ckpt.TOKENIZER_FILE).read_bytes():
            raise CheckpointError(
                f"{tokenizer} differs from {newest / ckpt.TOKENIZER_FILE}: checkpoints with different tokenizers "
                "cannot be averaged (their ids name other tokens)"
            )


def average_checkpoints(run_dir: str | Path, count: int, out_dir: str | Path) -> Path:
    """Write the average of ``run_dir``'s last ``count`` checkpoints to ``out_dir``; returns it."""
    run_dir, out_dir = Path(run_dir).expanduser(), Path(out_dir).expanduser()
    ckpt.refuse_inside_checkpoints(out_dir)
    if out_dir.exists() and not (out_dir / "averaged.json").is_file():
        raise CheckpointError(f"{out_dir} exists and is not an averaged checkpoint; give a new folder")
    chosen = last_checkpoints(run_dir, count)
    check_agreement(chosen)
    with atomic_folder(out_dir) as tmp:
        for name in (ckpt.MODEL_FILE, ckpt.OBJECTIVE_FILE):
            files = [c / name for c in chosen]
            if all(f.is_file() for f in files):
                save_safetensors(average_weights(files), tmp / name)
        for name in (ckpt.CONFIG_FILE, ckpt.TOKENIZER_FILE):
            if (chosen[-1] / name).is_file():
                shutil.copy2(chosen[-1] / name, tmp / name)
        steps = [ckpt.Checkpoint(c).step() for c in chosen]
        record = {"steps": steps, "checkpoints": [str(c) for c in chosen]}
        (tmp / "averaged.json").write_text(json.dumps(record) + "\n")
    return out_dir


def main(argv: list[str] | None = None) -> None:
    parser = failures.ArgumentParser(
        prog="plm-average", description="Average the weights of a run's last N checkpoints (Vaswani et al. 2017)."
    )
    parser.add_argument("run_dir", help="a plm-train run directory (or its checkpoints/ folder)")
    parser.add_argument("count", type=int, help="how many of the newest checkpoints to average (paper: 5 base, 20 big)")
    parser.add_argument("out_dir", help="folder to write the averaged checkpoint to")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    failures.task_started()  # no run directory: an OSError names its own path
    try:
        out = average_checkpoints(args.run_dir, args.count, args.out_dir)
    except Exception as err:
        if not failures.report(err):
            raise
        sys.exit(1)
    steps = json.loads((out / "averaged.json").read_text())["steps"]
    log.info("averaged steps %s into %s", ", ".join(map(str, steps)), out)


if __name__ == "__main__":
    main()
