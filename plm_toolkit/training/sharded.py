"""Sharded checkpoints of FSDP runs, written and read with ``torch.distributed.checkpoint`` (DCP).

``checkpoints/step_N/sharded/`` holds the module (backbone and objective) and the optimizer state, each rank
writing its own shard file (``__<rank>_0.distcp``) and rank 0 the ``.metadata`` that lists them; the rest of the
checkpoint (config, tokenizer, ``trainer_state.pt``) is as in an unsharded run. The folder is written under a
temporary name and renamed by rank 0 once every rank has finished, so a crash leaves the previous checkpoint as
the newest complete one. DCP reshards on load, so a run resumes onto a different number of processes, or onto
one process without FSDP.

The final checkpoint of a run also gets ``model.safetensors`` and ``objective.safetensors`` (gathered once), so
fine-tuning and export read it like any other; for an earlier one, ``python -m plm_toolkit.training.sharded
CHECKPOINT`` writes them from the shards in one process.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.metadata import TensorStorageMetadata
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)

from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core.atomic import atomic_file, save_safetensors
from plm_toolkit.core.errors import CheckpointError
from plm_toolkit.core.weights import SHARDED_DIR, is_sharded, unique_tensors
from plm_toolkit.training.distributed import ProcessInfo, barrier, broadcast_object

MODULE_PREFIX = "module."


def _state(module: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    model_state, optimizer_state = get_state_dict(module, optimizer)
    return {"module": model_state, "optimizer": optimizer_state}


def _split(full: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    """A PretrainingModule state (``model.*``, ``objective.*``) as the two weight files' contents."""
    parts: dict[str, dict[str, torch.Tensor]] = {"model": {}, "objective": {}}
    for key, tensor in full.items():
        part, _, name = key.partition(".")
        parts[part][name] = tensor
    return {part: unique_tensors(state) for part, state in parts.items()}


def _write_weight_files(parts: dict[str, dict[str, torch.Tensor]], folder: Path) -> None:
    for part, name in (("model", ckpt.MODEL_FILE), ("objective", ckpt.OBJECTIVE_FILE)):
        with atomic_file(folder / name) as tmp:
            save_safetensors(parts[part], tmp)


def save_sharded(
    run_dir: Path,
    step: int,
    module: nn.Module,
    optimizer: torch.optim.Optimizer,
    trainer_state: dict,
    config_yaml: str,
    tokenizer_json: str | None,
    keep_last: int,
    process: ProcessInfo,
    full_weights: bool,
) -> Path:
    """Every rank writes its shard into one temporary folder; rank 0 then completes and publishes it."""
    root = run_dir / "checkpoints"
    tag = broadcast_object(os.getpid(), process)
    if process.is_main:
        ckpt.temporary_directory(root, step, tag)
    barrier(process)
    tmp = root / f"{ckpt.TMP_PREFIX}step_{step}-{tag}"
    dcp.save(_state(module, optimizer), checkpoint_id=str(tmp / SHARDED_DIR))
    if full_weights:
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        full = get_model_state_dict(module, options=options)  # gathered on rank 0 only
        if process.is_main:
            _write_weight_files(_split(full), tmp)
    final = None
    if process.is_main:
        ckpt.write_common_files(tmp, trainer_state, config_yaml, tokenizer_json)
        final = ckpt.publish(root, tmp, step, keep_last)
    return Path(broadcast_object(str(final) if final else None, process))


def _metadata(folder: Path):
    if not (folder / ".metadata").is_file():
        raise CheckpointError(f"{folder}: no .metadata file; not a complete torch.distributed.checkpoint folder")
    try:
        return FileSystemReader(str(folder)).read_metadata()
    except Exception as err:
        raise CheckpointError(f"{folder}/.metadata: not readable ({err})") from err


def check_shards(folder: Path):
    """The checkpoint's metadata, after making sure every shard file it lists is there (naming those that are not,
    with the rank that wrote each)."""
    metadata = _metadata(folder)
    files = sorted({info.relative_path for info in metadata.storage_data.values()})
    missing = [f for f in files if not (folder / f).is_file()]
    if missing:
        ranks = sorted({int(m.group(1)) for f in missing if (m := re.match(r"__(\d+)_", f))})
        raise CheckpointError(
            f"{folder}: shard file(s) {', '.join(missing)} missing (written by rank(s) "
            f"{', '.join(map(str, ranks)) or '?'} of {len(files)}); this checkpoint is incomplete: resume from an "
            "earlier one (trainer.resume=PATH)"
        )
    return metadata


def check_compatible(folder: Path, metadata, module_state: dict) -> None:
    """Refuse, naming the tensors, a checkpoint written by a model of another shape."""
    stored = {k: m for k, m in metadata.state_dict_metadata.items() if isinstance(m, TensorStorageMetadata)}
    problems = []
    for name, tensor in module_state.items():
        entry = stored.get(MODULE_PREFIX + name)
        if entry is None:
            problems.append(f"{name} missing")
        elif tuple(entry.size) != tuple(tensor.shape):
            problems.append(f"{name} {tuple(entry.size)} vs expected {tuple(tensor.shape)}")
    unexpected = [k[len(MODULE_PREFIX) :] for k in stored if k.startswith(MODULE_PREFIX)]
    unexpected = [k for k in unexpected if k not in module_state]
    if problems or unexpected:
        raise CheckpointError(
            f"{folder}: written by a different model config ({'; '.join(problems[:5])}"
            f"{'; unexpected: ' + ', '.join(unexpected[:5]) if unexpected else ''}); resume with the model config "
            "of that run (its config.yaml), or start a new run directory"
        )


def load_sharded(path: Path, module: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Load a sharded checkpoint into ``module`` (sharded or not) and ``optimizer``, resharding as needed."""
    folder = path / SHARDED_DIR
    metadata = check_shards(folder)
    state = _state(module, optimizer)
    check_compatible(folder, metadata, state["module"])
    try:
        dcp.load(state, checkpoint_id=str(folder))
    except Exception as err:
        raise CheckpointError(f"{folder}: could not be read ({str(err).strip().splitlines()[0]})") from err
    set_state_dict(module, optimizer, model_state_dict=state["module"], optim_state_dict=state["optimizer"])


def consolidate(path: Path) -> list[Path]:
    """Write ``model.safetensors`` and ``objective.safetensors`` into a sharded checkpoint, in this one process."""
    folder = path / SHARDED_DIR
    metadata = check_shards(folder)
    full = {
        key: torch.empty(entry.size, dtype=entry.properties.dtype)
        for key, entry in metadata.state_dict_metadata.items()
        if key.startswith(MODULE_PREFIX) and isinstance(entry, TensorStorageMetadata)
    }
    dcp.load(full, storage_reader=FileSystemReader(str(folder)), no_dist=True)
    _write_weight_files(_split({k[len(MODULE_PREFIX) :]: v for k, v in full.items()}), path)
    return [path / ckpt.MODEL_FILE, path / ckpt.OBJECTIVE_FILE]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m plm_toolkit.training.sharded",
        description="Write model.safetensors and objective.safetensors into a sharded (FSDP) checkpoint.",
    )
    parser.add_argument("checkpoint", help="a checkpoints/step_N folder, checkpoints/last or a run directory")
    args = parser.parse_args(argv)
    try:
        found = ckpt.find_checkpoint(args.checkpoint, Path("."))
        if found is None or not is_sharded(found.path):
            raise CheckpointError(f"{args.checkpoint}: not a sharded checkpoint (no {SHARDED_DIR}/.metadata)")
        for written in consolidate(found.path):
            print(written)
    except CheckpointError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
