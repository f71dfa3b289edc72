"""Process groups for data parallelism. Only the training code reads these; models never do."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


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


def launched_world_size() -> int:
    """Number of processes torchrun started (1 when not launched by torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def init_process_group(backend: str) -> ProcessInfo:
    """Join the group torchrun set up (RANK/WORLD_SIZE/MASTER_ADDR in the environment)."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, rank=rank, world_size=world)
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


def barrier(info: ProcessInfo) -> None:
    if info.distributed:
        dist.barrier()


def all_gather_objects(obj, info: ProcessInfo) -> list:
    """Every rank's value of a picklable object, in rank order (a one-element list without a process group)."""
    if not info.distributed:
        return [obj]
    out = [None] * info.world_size
    dist.all_gather_object(out, obj)
    return out
