"""torch.compile in the training loop: whether a run compiles and unpads (``hardware.compile`` / ``hardware.unpad``,
null = where it pays), the compiled forward with its fallback to eager, and the count of the graphs it builds.

The loop hands the compiled step batches of a few fixed shapes (data/batching/shapes.py), and compiles with
``dynamic=False``: one graph per shape, built once, with no dynamic-shape kernels. Dynamo's counters say how many
graphs a step built; the loop logs that and the time it took (``CompileWatch``).
"""

from __future__ import annotations

import importlib.util
import logging
import shutil
import time
from dataclasses import dataclass

import torch
from torch import nn

from plm_toolkit.objectives.base import Objective

log = logging.getLogger("plm_toolkit")

# Dynamo keeps at most this many graphs per function by default (recompile_limit 8) and runs the rest eagerly; a run
# with many widths (sequence 512: eight 64-token buckets, in training and with or without packed rows) needs more.
RECOMPILE_LIMIT = 64


@dataclass(frozen=True)
class SpeedSwitches:
    compile: bool
    unpad: bool
    # Why the run does not compile where compilation was asked for, or None.
    refused: str | None = None


def speed_switches(hw, device: torch.device, objective: type[Objective], model: type[nn.Module]) -> SpeedSwitches:
    """What ``hardware.compile`` and ``hardware.unpad`` come to for this run: as set, or (null) on where the
    objective says compiling pays on this device (``Objective.compiles_by_default``) and no compiler is missing."""
    wanted = hw.compile if hw.compile is not None else device.type in objective.compiles_by_default
    refused = objective.compile_refusal if wanted else None
    problem = compiler_problem(device) if wanted and refused is None else None
    if problem and hw.compile:
        log.warning("hardware.compile=true but %s; training continues without torch.compile", problem)
    if refused and hw.compile:
        log.warning("hardware.compile=true is not offered: %s; training runs eagerly", refused)
    compiled = bool(wanted) and refused is None and problem is None
    unpad = hw.unpad
    if unpad is None:  # on where packing is possible and the step is compiled on a device where it pays
        takes_positions = "position_ids" in _forward_parameters(model)
        unpad = compiled and objective.reads_packed_rows and takes_positions and device.type != "cpu"
    return SpeedSwitches(compiled, bool(unpad), refused)


def _forward_parameters(model: type[nn.Module]) -> tuple[str, ...]:
    import inspect

    return tuple(inspect.signature(model.forward).parameters)


def compiler_problem(device: torch.device) -> str | None:
    """Why torch.compile's default backend cannot run here, or None when it looks able to."""
    if device.type == "cuda":
        return None if importlib.util.find_spec("triton") is not None else "triton is not installed"
    if not any(shutil.which(c) for c in ("g++", "c++", "clang++")):
        return "no C++ compiler (g++, c++ or clang++) on PATH"
    return None


def _compile_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = []
    for module_name, name in (
        ("torch._dynamo.exc", "BackendCompilerFailed"),
        ("torch._dynamo.exc", "InternalTorchDynamoError"),
        ("torch._inductor.exc", "InductorError"),
    ):
        try:
            module = __import__(module_name, fromlist=[name])
        except ImportError:
            continue
        if hasattr(module, name):
            errors.append(getattr(module, name))
    return tuple(errors)


def configure_compiler(device: torch.device) -> None:
    """Process-wide torch.compile settings of a training run, set before anything compiles.

    On a CPU, random numbers (dropout) come from ATen's generator rather than inductor's own: inductor draws them
    per element inside the kernels it generates, which then run unvectorized (BERT-Tiny's fused
    mask-softmax-dropout kernel took 8.3 ms a layer against 1.0 with ATen's draws). A compiled step then also drops
    the same units as an eager one with the same seed.
    """
    config = torch._dynamo.config
    for limit in ("recompile_limit", "cache_size_limit"):  # the name changed in torch 2.6
        if hasattr(config, limit):
            setattr(config, limit, max(getattr(config, limit), RECOMPILE_LIMIT))
            break
    if device.type == "cpu":
        from torch._inductor import config as inductor_config

        inductor_config.fallback_random = True


def compile_module(module: nn.Module, mode: str | None = None, backend: str = "inductor"):
    """``module`` through torch.compile with static shapes (one graph per batch shape)."""
    return torch.compile(module, mode=mode, backend=backend, dynamic=False)


class CompiledForward:
    """The compiled forward, falling back to the eager module (one warning) when compilation fails."""

    def __init__(self, module: nn.Module, mode: str | None = None, backend: str = "inductor"):
        self.eager = module
        self.compiled = compile_module(module, mode, backend)
        self.failed = False

    def __call__(self, *args, **kwargs):
        if not self.failed:
            try:
                return self.compiled(*args, **kwargs)
            except _compile_errors() as err:
                self.failed = True
                reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
                log.warning("torch.compile failed (%s); training continues without it (hardware.compile)", reason)
        return self.eager(*args, **kwargs)


def graphs_built() -> int:
    """Graphs torch.compile has built in this process so far."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


class CompileWatch:
    """Counts the graphs each training step builds and the seconds those steps took, and says so in the log: the
    first step's compilation, and any later step that meets a new batch shape."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.graphs = 0
        self.seconds = 0.0
        self._start = self._before = 0

    def begin(self) -> None:
        if self.enabled:
            self._before, self._start = graphs_built(), time.perf_counter()

    def end(self, step: int, batch: dict[str, torch.Tensor]) -> None:
        """After step ``step`` (its forward and backward, where compilation happens) over ``batch``."""
        if not self.enabled:
            return
        new = graphs_built() - self._before
        if new <= 0:
            return
        took = time.perf_counter() - self._start
        self.graphs += new
        self.seconds += took
        shape = "x".join(str(n) for n in batch["input_ids"].shape) if "input_ids" in batch else "?"
        log.info(
            "torch.compile: step %d built %d graph(s) for input_ids %s in %.1f s (%d graph(s), %.1f s so far)",
            step,
            new,
            shape,
            took,
            self.graphs,
            self.seconds,
        )

    def record(self) -> dict[str, float]:
        """What metrics.jsonl's training records carry: the graphs and the seconds of the steps that built them."""
        return {"compiled_graphs": self.graphs, "compile_s": round(self.seconds, 3)} if self.enabled else {}
