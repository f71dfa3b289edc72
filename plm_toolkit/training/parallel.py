"""How the trained module is spread over processes and compiled: DDP, FSDP2 and torch.compile (training/compilation.py).

FSDP2 (``torch.distributed.fsdp.fully_shard``) shards every parameter on its first dimension over a one-dimensional
device mesh. Each transformer block is its own unit, so only one block's parameters are gathered at a time; the
root unit holds the rest (embeddings, heads, the generator's non-block parts), which also keeps tied weights (the
MLM decoder is the word embedding) in one unit. A block is found without knowing the family: a child of an
``nn.ModuleList`` whose parameters no other part of the model shares (ALBERT's shared attention blocks stay in the
root unit; its one layer applied N times is a unit of its own, gathered at each use).
"""

from __future__ import annotations

import logging
from collections import Counter

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from plm_toolkit.core.errors import ConfigError
from plm_toolkit.training.compilation import CompiledForward, configure_compiler
from plm_toolkit.training.precision import Runtime

log = logging.getLogger("plm_toolkit")


def shard_units(module: nn.Module) -> list[nn.Module]:
    """Transformer blocks to shard one by one: children of ModuleLists whose parameters appear nowhere else."""
    uses = Counter(id(p) for _, p in module.named_parameters(remove_duplicate=False))
    units, seen = [], set()
    for sub in module.modules():
        if not isinstance(sub, nn.ModuleList):
            continue
        for child in sub:
            if id(child) in seen:
                continue
            seen.add(id(child))
            inside = Counter(id(p) for _, p in child.named_parameters(remove_duplicate=False))
            if inside and all(uses[i] == n for i, n in inside.items()):
                units.append(child)
    # A block nested in another block (a ModuleList inside a layer) stays with its outer unit.
    nested = {id(m) for u in units for m in u.modules() if m is not u}
    return [u for u in units if id(u) not in nested]


def check_shardable(module: nn.Module) -> None:
    """FSDP shards on dimension 0, so a scalar parameter cannot be split; name it and the ways out."""
    scalars = [name for name, p in module.named_parameters() if p.dim() == 0]
    if scalars:
        raise ConfigError(
            f"hardware.distributed=fsdp cannot shard the 0-dimensional parameter(s) {', '.join(scalars[:5])}: "
            "FSDP splits parameters along their first dimension. Use hardware.distributed=ddp, or make the "
            "parameter a 1-element vector"
        )


def apply_fsdp(
    module: nn.Module, runtime: Runtime, reshard_after_forward: bool, compile_blocks: bool, mode: str | None = None
) -> nn.Module:
    """Shard ``module`` in place: every block (compiled first with ``compile_blocks``), then the root."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    check_shardable(module)
    # On a CPU the mesh must say so explicitly: FSDP would otherwise look for an accelerator.
    mesh = init_device_mesh(runtime.device.type, (runtime.process.world_size,))
    policy = MixedPrecisionPolicy()
    if runtime.precision == "bf16":
        # bf16 compute and communication of parameters, fp32 gradient reduction and fp32 master weights.
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    units = shard_units(module)
    for unit in units:
        if compile_blocks:
            unit.compile(mode=mode, dynamic=False)
        fully_shard(unit, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard_after_forward)
    # The root never reshards after forward: the objective's heads (and the tied word embedding) are used again in
    # backward, and the loop's output (an ObjectiveOutput) is no pytree FSDP can hang an unshard hook on, so a
    # resharded root parameter would be read freed (found on an H100: "setStorage ... storage of size 0").
    fully_shard(module, mesh=mesh, mp_policy=policy, reshard_after_forward=False)
    log.info("FSDP: %d blocks sharded over %d processes", len(units), runtime.process.world_size)
    return module


def prepare_module(module: nn.Module, runtime: Runtime, hw, compiled: bool) -> tuple:
    """(what the loop calls forward on, the DDP wrapper or None). FSDP shards ``module`` in place; ``compiled``:
    the forward goes through torch.compile (per block under FSDP)."""
    mode = getattr(hw.compile_mode, "value", hw.compile_mode)
    mode = None if mode == "default" else mode
    if compiled:
        configure_compiler(runtime.device)
    if runtime.fsdp:
        apply_fsdp(module, runtime, bool(hw.reshard_after_forward), compiled, mode)
        return module, None
    forward, ddp = module, None
    if runtime.ddp:
        # find_unused_parameters: an objective may leave part of the backbone idle (MLM alone never uses
        # BERT's pooler), which plain DDP treats as an error.
        device_ids = [runtime.device.index] if runtime.device.type == "cuda" else None
        forward = ddp = DistributedDataParallel(module, device_ids=device_ids, find_unused_parameters=True)
    if compiled:
        forward = CompiledForward(forward, mode, hw.compile_backend)
    return forward, ddp
