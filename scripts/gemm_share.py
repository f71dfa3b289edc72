"""Where one training step's time goes, ours and transformers', for ``--model bert``, ``gpt2`` or ``t5``, on a CPU
or a GPU: matrix products, attention, the optimizer, the rest. The share in matrix products bounds any speedup
that computes the same products (a step cannot be shorter than its GEMMs).

    python scripts/gemm_share.py --model t5 --config small --batch-size 8 --threads 1
    python scripts/gemm_share.py --model bert --config base --batch-size 256 --device cuda --precision bf16 \
        --variant fused+compile+unpad

Prints one JSON object: per model the wall time of a step, the profiled time (CPU: the ops' self time; CUDA: the
kernels' time), the time per category and the slowest ops or kernels; ``bound`` = transformers' profiled step over
our GEMM time, the speedup ours would reach if everything but its matrix products took no time at all. Batches and
runners are ``bert_runners.py``'s (bert; ``--variant``: a ``bench_pretrain.py`` variant), ``bench_gpt2.py``'s and
``bench_t5.py``'s.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import bench_gpt2
import bench_pretrain
import bench_t5
import bert_runners
import torch
from side_by_side import autocast_factory
from torch.profiler import ProfilerActivity, profile

from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.objectives.masking import masking_from_config
from plm_toolkit.objectives.mlm import MlmConfig

CPU_GEMMS = {"aten::mm", "aten::addmm", "aten::addmm_", "aten::bmm", "aten::baddbmm", "aten::_addmm_activation"}
# Substrings of a CPU op's or CUDA kernel's lower-cased name -> its category; the first match wins, so attention
# kernels (often cutlass-based) are told apart before GEMMs.
CATEGORIES = [
    ("attention", ("flash", "fmha", "attention", "mem_eff", "scaled_dot_product")),
    ("optimizer", ("multi_tensor", "adam", "foreach")),
    ("gemm", ("gemm", "xmma", "nvjet", "cublas", "cutlass", "matmul")),
    ("compiled", ("triton",)),
    ("copy", ("memcpy", "memset", "copy_", "to_copy")),
]


def category(name: str, device: str) -> str:
    if device == "cpu" and name in CPU_GEMMS:
        return "gemm"
    lowered = name.lower()
    for label, needles in CATEGORIES:
        if device == "cpu" and label == "gemm":
            continue  # a CPU op is a GEMM by its exact name (aten::matmul only dispatches to them)
        if any(needle in lowered for needle in needles):
            return label
    return "other"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=["bert", "gpt2", "t5"], default="t5")
    parser.add_argument("--config", choices=["tiny", "small", "base"], default="small")
    parser.add_argument("--variant", choices=sorted(bert_runners.SWITCHES), help="bert: our speed switches")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--min-fill", type=float, default=0.8, help="bert: rows hold min-fill..1 x seq-len tokens")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first (compilation happens there)")
    parser.add_argument("--profiled-steps", type=int, default=1)
    parser.add_argument("--top", type=int, default=12, help="ops or kernels listed per model")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    args.vocab_size = {"gpt2": 50257, "t5": 32128}.get(args.model, 30522)
    args.prompt_len, args.new_tokens = 32, 64  # bench_gpt2's config sizes its positions with them
    if args.model == "bert" and args.config == "small":
        parser.error("--model bert: --config tiny or base")
    if args.variant is None:
        args.variant = "fused+compile+unpad" if args.device == "cuda" else "fused"
    return args


def bert_steps(args, device: torch.device, run_dir: Path):
    """-> name -> (a step function of one CPU batch, the batches): bench_pretrain's runners, prepared as plm-train's
    data loader would hand the batches over."""
    vocab = Vocab(size=args.vocab_size, **bert_runners.VOCAB_IDS)
    config = bert_runners.bert_config(args)
    batches = bert_runners.make_batches(
        args, vocab, masking_from_config(MlmConfig(), vocab), args.warmup + 1 + args.profiled_steps, args.batch_size
    )
    switches = bert_runners.SWITCHES[args.variant]
    builders = {
        "ours": lambda: bert_runners.OursRunner(
            args.variant, config, vocab, device, args.precision, switches, args.batch_size, run_dir
        ),
        "transformers": lambda: bert_runners.TransformersRunner(
            "transformers", config, vocab, device, args.precision, args.batch_size
        ),
    }
    for name, build in builders.items():
        torch.manual_seed(args.seed)
        runner = build()
        yield name, runner.step, [runner.prepare(b) for b in batches]


def suite_steps(args, device: torch.device):
    suite = (bench_gpt2 if args.model == "gpt2" else bench_t5).suite(args)
    batches = [{k: v.to(device) for k, v in b.items()} for b in suite.batches(args.warmup + 1 + args.profiled_steps)]
    autocast = autocast_factory(args.precision, device)
    for name, build in suite.runners.items():
        torch.manual_seed(args.seed)
        runner = build(device)
        yield name, (lambda batch, runner=runner: runner.step(batch, autocast)), batches


def measure(step, batches, args, device: torch.device) -> dict:
    for batch in batches[: args.warmup]:
        step(batch)
    bench_pretrain.synchronize(device)
    start = time.perf_counter()
    step(batches[args.warmup])
    bench_pretrain.synchronize(device)
    wall = time.perf_counter() - start
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for batch in batches[args.warmup + 1 :]:
            step(batch)
        bench_pretrain.synchronize(device)
    seconds: dict[str, float] = defaultdict(float)
    for event in prof.key_averages():
        if device.type == "cuda":  # kernels only: an op's own time is launch overhead, its kernels are counted
            if event.device_type != torch.autograd.DeviceType.CUDA:
                continue
            seconds[event.key] += event.self_device_time_total / 1e6 / args.profiled_steps
        else:
            seconds[event.key] += event.self_cpu_time_total / 1e6 / args.profiled_steps
    total = sum(seconds.values())
    by_category: dict[str, float] = defaultdict(float)
    for name, value in seconds.items():
        by_category[category(name, device.type)] += value
    top = sorted(seconds.items(), key=lambda item: -item[1])[: args.top]
    return {
        "step_s": round(wall, 4),
        "profiled_s": round(total, 4),
        "gemm_s": round(by_category["gemm"], 4),
        "gemm_share": round(by_category["gemm"] / total, 3) if total else None,
        "categories_s": {k: round(v, 4) for k, v in sorted(by_category.items(), key=lambda item: -item[1])},
        "top_ms": {name[:90]: round(value * 1000, 2) for name, value in top},  # per step
    }


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    result = {
        "model": args.model,
        "config": args.config,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "precision": args.precision,
        "threads": args.threads,
        "batch_size": args.batch_size,
        "seq_len": args.seq_len,
    }
    if args.model == "bert":
        result["variant"] = args.variant
    with tempfile.TemporaryDirectory() as tmp:
        steps = bert_steps(args, device, Path(tmp)) if args.model == "bert" else suite_steps(args, device)
        for name, step, batches in steps:
            result[name] = measure(step, batches, args, device)
    result["bound"] = round(result["transformers"]["profiled_s"] / result["ours"]["gemm_s"], 2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
