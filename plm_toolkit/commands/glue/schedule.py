"""plm-glue on several GPUs: one sub-run per GPU at a time, each in a worker process of its own
(``python -m plm_toolkit.commands.glue.runs FOLDER`` with ``CUDA_VISIBLE_DEVICES`` set to its GPU), the longest sub-runs first
so that the GPUs finish close together. On a CPU or one GPU plm-glue runs the sub-runs one after another in its own
process instead.

``schedule`` knows nothing of GPUs or processes: it hands jobs to free devices through a ``launch`` function and polls
what that returns, so a test can drive it with a fake launcher.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

log = logging.getLogger("plm_toolkit")

WORKER_LOG = "worker.log"


class Running(Protocol):
    def poll(self) -> int | None: ...


@dataclass(frozen=True)
class Job:
    name: str
    folder: Path
    # How long it is expected to take, in any unit (training rows x epochs): longer jobs start first.
    weight: float = 0.0


def visible_gpus(device: str, limit: int | None) -> list[str]:
    """The GPUs plm-glue hands sub-runs to, as CUDA_VISIBLE_DEVICES names them (the parent's own list when it has
    one): none on a CPU (hardware.device=cpu or no GPU), at most ``limit`` (glue.max_parallel)."""
    if device == "cpu" or not torch.cuda.is_available():
        return []
    inherited = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = [n.strip() for n in inherited.split(",") if n.strip()] if inherited else []
    names = names or [str(i) for i in range(torch.cuda.device_count())]
    return names[: torch.cuda.device_count()][:limit]


def schedule(
    jobs: list[Job],
    devices: list[str],
    launch: Callable[[Job, str], Running],
    finished: Callable[[Job, int], None],
    poll_seconds: float = 2.0,
    sleep: Callable[[float], None] = time.sleep,
) -> list[tuple[Job, int]]:
    """Run ``jobs`` on ``devices``, one job per device at a time, the heaviest first; ``finished(job, exit status)`` is
    called as each ends. After a failure no new job starts; the running ones are waited for. Returns the jobs that
    failed, with their exit status."""
    pending = sorted(jobs, key=lambda job: -job.weight)
    free = list(devices)
    running: dict[str, tuple[Job, Running]] = {}
    failed: list[tuple[Job, int]] = []
    while running or (pending and not failed):
        while pending and free and not failed:
            device = free.pop(0)
            job = pending.pop(0)
            log.info("sub-run %s: starting on GPU %s", job.name, device)
            running[device] = (job, launch(job, device))
        for device, (job, process) in list(running.items()):
            status = process.poll()
            if status is None:
                continue
            del running[device]
            free.append(device)
            finished(job, status)
            if status != 0:
                failed.append((job, status))
        if running:
            sleep(poll_seconds)
    return failed


def launch_worker(job: Job, device: str) -> subprocess.Popen:
    """A worker process for ``job`` on GPU ``device``; its output goes to the sub-run's worker.log."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": device}
    with open(job.folder / WORKER_LOG, "a", encoding="utf-8") as out:
        command = [sys.executable, "-m", "plm_toolkit.commands.glue.runs", str(job.folder)]
        return subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)


def failure_line(job: Job) -> str:
    """The worker's ``error:`` line (its last), or where to read what happened."""
    path = job.folder / WORKER_LOG
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines() if path.is_file() else []
    errors = [line.removeprefix("error: ") for line in lines if line.startswith("error: ")]
    return errors[-1] if errors else f"see {path}"
