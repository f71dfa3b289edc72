"""Two training steps timed against each other on the same batches: our model with its objective, and the
transformers class of the same architecture. ``bench_gpt2.py`` and ``bench_t5.py`` describe their pair as a
``Suite``; ``bench_pretrain.py --model gpt2|t5`` runs them.

Each batch runs through one model then the other, alternating which goes first (so that neither always runs on a
cache the other warmed); the first ``--warmup`` batches are not timed. Peak memory: on CUDA,
``torch.cuda.max_memory_allocated`` over the timed steps less what was allocated before them; on CPU, each model
runs ``--memory-steps`` steps again in a fresh process (``--memory-probe NAME``) and reports its peak resident set
less its resident set before the first step.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from bench_pretrain import _memory_kib as memory_kib
from bench_pretrain import cpu_memory, pick_precision, synchronize

NAMES = ("ours", "transformers")


def make_optimizer(params: list[torch.nn.Parameter], device: torch.device) -> torch.optim.Optimizer:
    # The same settings for both models; fused kernels exist for CPU and CUDA.
    return torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, fused=True)


def autocast_factory(precision: str, device: torch.device):
    if precision == "bf16":
        return lambda: torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext


@dataclass
class Suite:
    # The name printed as "model".
    name: str
    # name ("ours", "transformers") -> a runner built on ``device``: ``step(batch, autocast)`` and
    # ``num_parameters``.
    runners: dict[str, Callable[[torch.device], Any]]
    # count -> that many CPU batches, the same for both models.
    batches: Callable[[int], list[dict[str, torch.Tensor]]]
    # A batch -> the tokens it trains on (what tokens/s counts).
    tokens: Callable[[dict[str, torch.Tensor]], int]


def training(args, suite: Suite, device: torch.device) -> dict:
    torch.manual_seed(args.seed)
    runners = {name: build(device) for name, build in suite.runners.items()}
    batches = [{k: v.to(device) for k, v in b.items()} for b in suite.batches(args.warmup + args.steps)]
    precision = pick_precision(args.precision, device)
    autocast = autocast_factory(precision, device)
    seconds = dict.fromkeys(NAMES, 0.0)
    memory = dict.fromkeys(NAMES, 0)
    for index, batch in enumerate(batches):
        for name in NAMES if index % 2 == 0 else NAMES[::-1]:
            synchronize(device)
            if device.type == "cuda":
                before = torch.cuda.memory_allocated(device)
                torch.cuda.reset_peak_memory_stats(device)
            start = time.perf_counter()
            runners[name].step(batch, autocast)
            synchronize(device)
            if index >= args.warmup:
                seconds[name] += time.perf_counter() - start
                if device.type == "cuda":
                    memory[name] = max(memory[name], torch.cuda.max_memory_allocated(device) - before)
    tokens = sum(suite.tokens(b) for b in batches[args.warmup :])
    result = {"precision": precision}
    for name in NAMES:
        entry = {
            "tokens_per_s": round(tokens / seconds[name], 1),
            "step_ms": round(1000 * seconds[name] / args.steps, 2),
            "parameters": runners[name].num_parameters,
        }
        if device.type == "cuda":
            entry["peak_memory_mb"] = round(memory[name] / 2**20, 1)
        result[name] = entry
    return result


def memory_probe(args, suite: Suite) -> dict:
    """CPU peak resident set of a few training steps of one model, less the resident set before them (MiB)."""
    torch.manual_seed(args.seed)
    device = torch.device("cpu")
    batches = suite.batches(args.memory_steps)
    runner = suite.runners[args.memory_probe](device)
    baseline = memory_kib("VmRSS")
    for batch in batches:
        runner.step(batch, autocast_factory(args.precision, device))
    return {"peak_memory_mb": round((memory_kib("VmHWM") - baseline) / 1024, 1)}


def device_of(args) -> torch.device:
    wants_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    return torch.device("cuda" if wants_cuda else "cpu")


def compare(args, argv: list[str], suite: Suite, device: torch.device) -> dict:
    """Both models' training figures side by side, with ``speedup`` (ours over transformers' tokens/s) and
    ``memory_ratio``."""
    result = {
        "model": suite.name,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "threads": torch.get_num_threads(),
        "config": args.config,
        "vocab_size": args.vocab_size,
        "seq_len": args.seq_len,
        "batch_size": args.batch_size,
        "steps": args.steps,
        "warmup": args.warmup,
    }
    result.update(training(args, suite, device))
    if device.type == "cpu" and not args.no_memory:
        for name, peak in cpu_memory(argv, list(NAMES), result["precision"]).items():
            result[name]["peak_memory_mb"] = peak
    result["speedup"] = round(result["ours"]["tokens_per_s"] / result["transformers"]["tokens_per_s"], 2)
    ours_memory, their_memory = result["ours"].get("peak_memory_mb"), result["transformers"].get("peak_memory_mb")
    if ours_memory and their_memory:
        result["memory_ratio"] = round(ours_memory / their_memory, 2)
    return result
