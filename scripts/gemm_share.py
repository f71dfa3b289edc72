"""How much of one training step is matrix products, ours and transformers', for ``--model gpt2`` or ``t5``: the
ceiling on any speedup that computes the same products (a step cannot be shorter than its GEMMs).

    python scripts/gemm_share.py --model t5 --config small --batch-size 8 --threads 1

Prints one JSON object: per model the wall time of a step, the profiled time, the time in mm/addmm/bmm kernels and
its share; ``bound`` = transformers' profiled step over our GEMM time, the speedup ours would reach if everything
but its matrix products took no time at all. Batches and runners are ``bench_gpt2.py``'s and ``bench_t5.py``'s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time

import bench_gpt2
import bench_t5
import torch
from torch.profiler import ProfilerActivity, profile

GEMMS = {"aten::mm", "aten::addmm", "aten::addmm_", "aten::bmm", "aten::baddbmm"}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=["gpt2", "t5"], default="t5")
    parser.add_argument("--config", choices=["tiny", "small", "base"], default="small")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    args.vocab_size = 50257 if args.model == "gpt2" else 32128
    args.prompt_len, args.new_tokens = 32, 64  # bench_gpt2's config sizes its positions with them
    return args


def measure(runner, batches) -> dict:
    for batch in batches[:-2]:
        runner.step(batch, contextlib.nullcontext)
    start = time.perf_counter()
    runner.step(batches[-2], contextlib.nullcontext)
    wall = time.perf_counter() - start
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        runner.step(batches[-1], contextlib.nullcontext)
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events) / 1e6
    gemm = sum(e.self_cpu_time_total for e in events if e.key in GEMMS) / 1e6
    return {
        "step_s": round(wall, 3),
        "profiled_s": round(total, 3),
        "gemm_s": round(gemm, 3),
        "gemm_share": round(gemm / total, 3),
    }


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    suite = (bench_gpt2 if args.model == "gpt2" else bench_t5).suite(args)
    batches = suite.batches(args.warmup + 2)
    result = {"model": args.model, "config": args.config, "threads": args.threads, "batch_size": args.batch_size}
    for name, build in suite.runners.items():
        torch.manual_seed(args.seed)
        result[name] = measure(build(torch.device("cpu")), batches)
    result["bound"] = round(result["transformers"]["profiled_s"] / result["ours"]["gemm_s"], 2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
