"""Device and numeric precision: autocast contexts and the fp16 loss scaler.

``resolve_runtime`` turns the ``hardware`` config into concrete choices once; the loop then only asks the
``Runtime`` for its autocast context and scaler.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from plm_toolkit.core.errors import ConfigError, TrainingError
from plm_toolkit.training.distributed import ProcessInfo, launched_world_size


def _value(x) -> str:
    return x.value if hasattr(x, "value") else str(x)


@dataclass(frozen=True)
class Runtime:
    device: torch.device
    precision: str  # fp32 | bf16 | fp16
    process: ProcessInfo
    ddp: bool
    backend: str
    # FSDP2: parameters, gradients and optimizer state sharded over the processes (training/parallel.py).
    fsdp: bool = False

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.precision)

    def autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype)


def resolve_runtime(hw, process: ProcessInfo | None = None) -> Runtime:
    """Concrete device/precision/distribution from the hardware config; raises ConfigError for impossible asks."""
    device_name = _value(hw.device)
    if device_name == "auto":
        device_name = "cuda" if torch.cuda.is_available() else "cpu"
    if device_name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("hardware.device=cuda but no CUDA device is visible; use hardware=cpu or hardware=auto")
    precision = _value(hw.precision)
    if precision == "auto":
        precision = "bf16" if device_name == "cuda" and torch.cuda.is_bf16_supported() else "fp32"
    if precision == "fp16" and device_name != "cuda":
        raise ConfigError("hardware.precision=fp16 needs a CUDA device; on a CPU use precision=bf16 or fp32")
    if precision == "bf16" and device_name == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError("hardware.precision=bf16 is not supported by this GPU; use precision=fp16")
    distributed = _value(hw.distributed)
    world = launched_world_size()
    if distributed == "fsdp" and precision == "fp16":
        raise ConfigError(
            "hardware.distributed=fsdp with hardware.precision=fp16 is not supported (FSDP's mixed precision "
            "keeps bf16 parameters); use precision=bf16 or fp32"
        )
    if distributed == "ddp" and world == 1:
        raise ConfigError(
            "hardware.distributed=ddp but this process was not started by torchrun with several processes; "
            "launch with `torchrun --nproc_per_node N -m plm_toolkit.commands.train ...` or use hardware.distributed=none"
        )
    if distributed == "none" and world > 1:
        raise ConfigError(
            f"launched with WORLD_SIZE={world} but hardware.distributed=none; use hardware.distributed=ddp or auto"
        )
    fsdp = distributed == "fsdp"
    ddp = world > 1 and not fsdp
    backend = _value(hw.backend)
    if backend == "auto":
        backend = "nccl" if device_name == "cuda" else "gloo"
    process = process or ProcessInfo()
    device = torch.device(device_name, process.local_rank) if device_name == "cuda" else torch.device("cpu")
    if getattr(hw, "num_threads", 0) > 0:
        torch.set_num_threads(int(hw.num_threads))
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = bool(hw.allow_tf32)
        torch.backends.cudnn.allow_tf32 = bool(hw.allow_tf32)
    return Runtime(device=device, precision=precision, process=process, ddp=ddp, backend=backend, fsdp=fsdp)


class LossScaler:
    """fp16 dynamic loss scaling (GradScaler) that stops with advice after repeated overflow at the minimum scale.

    For fp32/bf16 it is a no-op with the same interface.
    """

    def __init__(self, runtime: Runtime, min_scale: float, max_overflow_steps: int):
        self.enabled = runtime.precision == "fp16"
        self.scaler = torch.amp.GradScaler(runtime.device.type, enabled=self.enabled)
        self.min_scale = min_scale
        self.max_overflow_steps = max_overflow_steps
        self.overflows_at_min = 0

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return self.scaler.scale(loss)

    def unscale_(self, optimizer) -> None:
        self.scaler.unscale_(optimizer)

    def step(self, optimizer) -> bool:
        """Apply the step unless the gradients overflowed; returns whether the step was taken."""
        if not self.enabled:
            optimizer.step()
            return True
        scale_before = self.scaler.get_scale()
        self.scaler.step(optimizer)
        self.scaler.update()
        skipped = self.scaler.get_scale() < scale_before
        if skipped and scale_before <= self.min_scale:
            self.overflows_at_min += 1
            if self.overflows_at_min >= self.max_overflow_steps:
                raise TrainingError(
                    f"fp16 gradients overflowed {self.overflows_at_min} steps in a row at the minimum loss scale "
                    f"({scale_before:g}); train with hardware.precision=bf16 (on GPUs that have it) or fp32, "
                    "or lower optimizer.lr"
                )
        elif not skipped:
            self.overflows_at_min = 0
        return not skipped

    def state_dict(self) -> dict:
        return {"scaler": self.scaler.state_dict(), "overflows_at_min": self.overflows_at_min}

    def load_state_dict(self, state: dict) -> None:
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.overflows_at_min = int(state.get("overflows_at_min", 0))
