"""Weight files: a module's weights written as safetensors (one name per storage, as safetensors requires), read
back refusing what would load without complaint and compute garbage (NaN or infinity, integers for floating-point
weights, mismatched shapes or keys), and a PyTorch state dict read without unpickling anything but tensors.

A sharded (FSDP) checkpoint holds its weights in a torch.distributed.checkpoint folder instead (``is_sharded``,
training/sharded.py). The checkpoint folder around the weight files is core/checkpoint.py's.
"""

from __future__ import annotations

import pickle
import re
import warnings
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import nn

from plm_toolkit.core.atomic import save_safetensors
from plm_toolkit.core.errors import CheckpointError

# A sharded (FSDP) run's weights and optimizer state: a torch.distributed.checkpoint folder, one file per rank.
SHARDED_DIR = "sharded"


def is_sharded(path: Path) -> bool:
    return (path / SHARDED_DIR / ".metadata").is_file()


def unique_state(module: nn.Module) -> dict[str, torch.Tensor]:
    """state_dict without second names for one storage (tied weights), contiguous, as safetensors requires."""
    return unique_tensors(module.state_dict())


def unique_tensors(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out, seen = {}, set()
    for name, tensor in state.items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if tensor.numel() and key in seen:
            continue
        seen.add(key)
        out[name] = tensor.detach().contiguous().cpu()
    return out


def save_weights(module: nn.Module, path: Path) -> None:
    save_safetensors(unique_state(module), path)


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    if not path.is_file():
        if is_sharded(path.parent):
            raise CheckpointError(
                f"{path}: not found; {path.parent} is a sharded (FSDP) checkpoint: write its {path.name} with "
                f"`python -m plm_toolkit.training.sharded {path.parent}`"
            )
        raise CheckpointError(f"{path}: weights file not found")
    try:
        state = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as err:
        raise CheckpointError(f"{path}: not a readable safetensors file ({err})") from err
    # Every tensor a checkpoint holds is a parameter (buffers are not saved): NaN or infinity anywhere is damage.
    for name, value in state.items():
        refuse_non_finite(path, name, value)
    return state


def refuse_non_finite(path: Path, name: str, value: torch.Tensor) -> None:
    """CheckpointError naming the file and tensor when a floating-point weight holds NaN or infinity (a run that
    diverged, a corrupt conversion): such weights load without complaint and compute garbage."""
    if value.is_floating_point() and not bool(torch.isfinite(value).all()):
        nan, inf = int(torch.isnan(value).sum()), int(torch.isinf(value).sum())
        raise CheckpointError(
            f"{path}: {name} holds {nan} NaN and {inf} infinite value(s); expected finite weights (the run that "
            "wrote them diverged, or the file is corrupt: use an earlier checkpoint)"
        )


def read_torch_weights(path: Path) -> dict[str, torch.Tensor]:
    """A ``pytorch_model.bin`` state dict, read with ``weights_only=True``: plain tensors only, never unpickled
    objects (a pickle can run code). A refusal is one line, without torch's advice to switch that off."""
    if path.is_file() and path.stat().st_size == 0:
        raise CheckpointError(f"{path}: empty file; expected a PyTorch state dict of tensors")
    try:
        with warnings.catch_warnings():  # torch warns, over two lines, of a pickle protocol it did not write
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        found = re.search(r"(?:Unsupported global: GLOBAL|unsupported GLOBAL) ([\w.]+)", str(err))
        if found:
            raise CheckpointError(
                f"{path}: refused: besides tensors this pickle holds {found.group(1)}, and unpickling it could run "
                "code; use a model.safetensors of these weights, or convert the file where you trust it and may run "
                "it (a throwaway container: transformers' save_pretrained(folder, safe_serialization=True))"
            ) from None
        detail = re.search(r"WeightsUnpickler error:\s*([^\n]+)", str(err))
        reason = detail.group(1).strip() if detail else "not a PyTorch zip or pickle file"
        raise CheckpointError(
            f"{path}: not a PyTorch weights file that loads safely ({reason}); expected torch.save of a state dict "
            f"of tensors, or a model.safetensors"
        ) from None
    except Exception as error:  # torch.load raises many kinds; all mean "unusable file"
        raise CheckpointError(f"{path}: not a readable PyTorch weights file ({torch_reason(error)})") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"{path}: expected a dict of tensors (a state dict)")
    return state


def torch_reason(error: Exception) -> str:
    """torch.load's complaint without the paragraphs of advice torch appends; an empty file's EOFError says so."""
    return str(error).split(". ")[0].strip() or ("empty file" if isinstance(error, EOFError) else type(error).__name__)


def load_weights(module: nn.Module, path: Path, strict: bool = True) -> None:
    """Load safetensors weights into ``module``; mismatches name the file and the keys."""
    state = read_weights(path)
    own = module.state_dict()
    wrong = [
        f"{k} {tuple(v.shape)} vs expected {tuple(own[k].shape)}"
        for k, v in state.items()
        if k in own and v.shape != own[k].shape
    ]
    if wrong:
        raise CheckpointError(f"{path}: incompatible shapes for {', '.join(wrong[:5])}")
    check_values(path, state, module)
    unique = unique_state(module)
    missing = [k for k in unique if k not in state]
    unexpected = [k for k in state if k not in own]
    if strict and (missing or unexpected):
        raise CheckpointError(
            f"{path}: does not match the {type(module).__name__} it loads into (missing keys: {_some(missing)}; "
            f"unexpected keys: {_some(unexpected)}); expected the file written with this config"
        )
    module.load_state_dict(state, strict=False)


def _some(names: list[str]) -> str:
    return (", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")) if names else "none"


def check_values(path: Path, state: dict[str, torch.Tensor], module: nn.Module, names: dict | None = None) -> None:
    """Refuse weights that would load without complaint and compute garbage: integers or booleans where the model
    holds floating-point values (``load_state_dict`` would cast them), and NaN or infinity in a parameter (a run that
    diverged, a corrupt conversion). Half precision is fine: it widens exactly. ``names``: ours -> the file's keys."""
    own = module.state_dict()
    parameters = {name for name, _ in module.named_parameters(remove_duplicate=False)}
    for key, value in state.items():
        target, name = own.get(key), (names or {}).get(key, key)
        if target is None:
            continue
        if target.is_floating_point() and not value.is_floating_point():
            raise CheckpointError(
                f"{path}: {name} is {str(value.dtype).removeprefix('torch.')}; expected floating-point weights "
                f"({str(target.dtype).removeprefix('torch.')}, float16 or bfloat16)"
            )
        if key in parameters:
            refuse_non_finite(path, name, value)
