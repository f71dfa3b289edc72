"""What the launcher says about this process before any process group exists: torchrun's (or a submitit task's)
rank, world size and key-value store. Read by the commands around any run, plm-prepare's included, so it lives below
the training code that joins the group (``training/distributed.py``)."""

from __future__ import annotations

import logging
import os
from datetime import timedelta

import torch.distributed as dist

log = logging.getLogger("plm_toolkit")


def adopt_submitit_environment() -> bool:
    """Inside a submitit task that no other launcher set up, export its rank, world size and master address as
    torchrun's variables (``TorchDistributedEnvironment``); True when it did."""
    if os.environ.get("SUBMITIT_EXECUTOR") not in ("slurm", "local") or "RANK" in os.environ:
        return False
    from submitit.helpers import TorchDistributedEnvironment

    # Every task derives the same master port from the job id (or takes MASTER_PORT when set).
    env = TorchDistributedEnvironment()
    env.export(set_cuda_visible_devices=False, overwrite=True)
    log.info("submitit task %d of %d (master %s:%s)", env.rank, env.world_size, env.master_addr, env.master_port)
    return True


def launched_world_size() -> int:
    """Number of processes the launcher started (1 when not launched by torchrun or submitit)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def launched_rank() -> int:
    """This process's rank as the launcher set it (0 when not launched), known before any process group exists."""
    return int(os.environ.get("RANK", "0"))


def launcher_store(name: str, timeout: float = 10.0) -> dist.Store | None:
    """A client of torchrun's own key-value store, under ``name`` and the launch attempt; None outside torchrun.

    torchrun's agent hosts that store (``TORCHELASTIC_USE_AGENT_STORE``) before it starts the workers and keeps it
    after one of them has died, so ranks can agree on something without a process group, or when a peer is gone.
    The attempt (``TORCHELASTIC_RESTART_COUNT``) keeps a restarted worker group from reading the last one's keys."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True" or launched_world_size() < 2:
        return None
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        is_master=False,
        timeout=timedelta(seconds=timeout),
        wait_for_workers=False,
    )
    return dist.PrefixStore(f"{name}/attempt_{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)


def launched() -> bool:
    """Whether a launcher (torchrun, or submitit through ``adopt_submitit_environment``) set up a rendezvous."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ
