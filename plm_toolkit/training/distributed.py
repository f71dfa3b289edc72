"""Process groups for data parallelism. Only the training code reads these; models never do.

A run joins a process group when a launcher started it: torchrun (RANK / WORLD_SIZE / MASTER_ADDR in the
environment), or a submitit task (``hydra/launcher=submitit_slurm`` or ``submitit_local``), whose rank and peers
``submitit.helpers.TorchDistributedEnvironment`` turns into the same variables. On CUDA the group gets two
backends: NCCL for tensors on the GPU and gloo for the small CPU collectives of the loop (target counts, stop
flags, object gathers), which NCCL cannot carry.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from plm_toolkit.core.launch import launched

log = logging.getLogger("plm_toolkit")


@dataclass(frozen=True)
class ProcessInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def group_backend(backend: str) -> str:
    """The backend string for ``init_process_group``: NCCL for CUDA tensors plus gloo for CPU tensors."""
    return "cpu:gloo,cuda:nccl" if backend == "nccl" else backend


def init_process_group(backend: str) -> ProcessInfo:
    """Join the group the launcher set up (RANK/WORLD_SIZE/MASTER_ADDR in the environment). Without a launcher,
    a one-process group on an in-memory store (FSDP on a single process)."""
    if not launched():
        if not dist.is_initialized():
            dist.init_process_group(group_backend(backend), store=dist.HashStore(), rank=0, world_size=1)
        return ProcessInfo(0, 1, 0)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if not dist.is_initialized():
        if backend == "nccl":
            torch.cuda.set_device(local_rank)
        dist.init_process_group(backend=group_backend(backend), rank=rank, world_size=world)
    return ProcessInfo(rank, world, local_rank)


def destroy_process_group(wait_for_peers: bool = False) -> None:
    """Leave the process group. After a run that finished, ``wait_for_peers`` first waits for every rank: a rank
    that tears its gloo connections down while a peer is still finishing makes that peer abort."""
    if dist.is_initialized():
        if wait_for_peers:
            dist.barrier()
        dist.destroy_process_group()


def all_reduce_sum(values: torch.Tensor, info: ProcessInfo) -> torch.Tensor:
    if info.distributed:
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


def all_reduce_max(values: torch.Tensor, info: ProcessInfo) -> torch.Tensor:
    if info.distributed:
        dist.all_reduce(values, op=dist.ReduceOp.MAX)
    return values


def in_lockstep(batches: Iterable, info: ProcessInfo, first_batch: Callable[[], Any]) -> Iterator[tuple[Any, bool]]:
    """(batch, real) pairs, as many on every process. A forward pass can be a collective (FSDP gathers every
    block's parameters from all processes; DDP broadcasts buffers in the first one after training), so each process
    must run as many as the others, or one waits forever, or gloo fails on mismatched messages; but evaluation
    batches are dealt out round-robin, one more to the first ranks when they do not divide (none to the last ranks
    when there are fewer batches than processes). So the processes agree before each batch whether any still has
    one, and a process that has run out runs its first batch again, or ``first_batch()`` when it had none
    (real=False: the caller discards it)."""
    if not info.distributed:
        yield from ((batch, True) for batch in batches)
        return
    iterator, spare = iter(batches), None
    while True:
        batch = next(iterator, None)
        if not all_reduce_max(torch.tensor([float(batch is not None)]), info).item():
            return
        if batch is not None:
            spare = batch if spare is None else spare
            yield batch, True
        else:
            spare = first_batch() if spare is None else spare
            yield spare, False


def barrier(info: ProcessInfo) -> None:
    if info.distributed:
        dist.barrier()


def broadcast_object(obj, info: ProcessInfo):
    """Rank 0's value of a small picklable object on every rank (only our own process group's messages)."""
    if not info.distributed:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def all_gather_objects(obj, info: ProcessInfo) -> list:
    """Every rank's value of a picklable object, in rank order (a one-element list without a process group)."""
    if not info.distributed:
        return [obj]
    out = [None] * info.world_size
    dist.all_gather_object(out, obj)
    return out
