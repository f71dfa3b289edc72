"""Pretraining throughput, peak memory and MFU: our BERT + MLM training step, with each speed switch, against
``transformers.BertForMaskedLM`` (sdpa attention) on the same batches.

"Ours" is the real training step of ``plm-train`` (the ``Trainer``'s ``OptimizerStep``: autocast, the objective,
the normalised loss, gradient clipping, the optimizer and schedule), built with the hardware switches each variant
names; the batches come from the CPU as the data loader hands them over. ``transformers`` runs the same batches
(same ``mlm_labels``) with the same AdamW settings and clipping. Variants are timed in turn, in blocks of
``--steps`` steps after ``--warmup`` untimed ones (compilation happens there), and ``--repeats`` rounds give the
median. Throughput counts non-padding tokens through forward, backward and the optimizer step; MFU counts 6N +
attention FLOPs per token (training/flops.py) against the device's peak.

Peak memory: on CUDA, ``torch.cuda.max_memory_allocated`` over a variant's timed steps, less what was allocated
before them. On CPU, each variant runs a few steps again in a fresh process and reports its peak resident set
(``VmHWM``) less its resident set before the first step.

    python scripts/bench_pretrain.py --config tiny
    python scripts/bench_pretrain.py --config base --seq-len 128 --precision bf16 --device cuda
    python scripts/bench_pretrain.py --config tiny --threads 1 --repeats 5     # on a machine others keep busy
    python scripts/bench_pretrain.py --model gpt2 --config tiny    # GPT-2 against GPT2LMHeadModel, + generation
    python scripts/bench_pretrain.py --model t5 --config small --batch-size 8    # T5 against T5ForConditionalGeneration

Prints one JSON object: per variant tokens/s (median and every round), step time, peak memory, MFU; ``speedup``
is ``ours`` (plm-train's defaults on this device) over ``transformers``. ``--reference-compile`` adds
``transformers+compile`` (the reference through ``torch.compile``) and ``speedups_vs_compiled_reference``, the
compiled variants against it: without it a compiled variant races an eager reference. Needs ``transformers``
(test extra).
``--model gpt2`` runs ``bench_gpt2.py``, ``--model t5`` ``bench_t5.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from bert_runners import (
    SIZES,
    SWITCHES,
    VOCAB_IDS,
    OursRunner,
    TransformersRunner,
    bert_config,
    make_batches,
    pin,
)

from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.objectives.masking import masking_from_config
from plm_toolkit.objectives.mlm import MlmConfig
from plm_toolkit.training.flops import peak_tflops

DEFAULT_VARIANTS = {
    "cpu": ["eager", "fused", "fused+unpad"],
    "cuda": ["eager", "fused", "fused+compile", "fused+compile+unpad"],
}


# The compiled references: runner name -> torch.compile mode; a variant compiled with CUDA graphs races the one
# with them, any other compiled variant the plain compiled one.
REFERENCE_COMPILE = {"transformers+compile": "default", "transformers+compile+cudagraphs": "reduce-overhead"}


def compiled_speedups(runs: dict, batch_size: int) -> dict[str, float]:
    """Each compiled variant's tokens/s over the compiled reference's in the same mode (both at their best)."""
    out = {}
    for name, entry in runs.items():
        if "compile" not in name or name.startswith("transformers") or entry["batch_size"] != batch_size:
            continue
        reference = runs.get("transformers+compile+cudagraphs" if "cudagraphs" in name else "transformers+compile")
        if reference:
            out[name] = round(entry["tokens_per_s"] / reference["tokens_per_s"], 2)
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=["bert", "gpt2", "t5"], default="bert")
    parser.add_argument(
        "--config",
        choices=["tiny", "base", "small"],
        default="tiny",
        help="bert: tiny, base; gpt2: tiny, small; t5: tiny, small, base",
    )
    parser.add_argument("--vocab-size", type=int, default=None, help="default: 30522 (bert), 50257 (gpt2), 32128 (t5)")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--large-batch",
        type=int,
        default=None,
        help="also run the best variant and transformers at this batch size (default: 256 on CUDA, none on CPU)",
    )
    parser.add_argument(
        "--reference-compile",
        action="store_true",
        help="also run BertForMaskedLM through torch.compile (transformers+compile), the reference for our compiled "
        "variants (CUDA graphs too where a variant uses them)",
    )
    parser.add_argument("--min-fill", type=float, default=0.8, help="rows hold min-fill..1 x seq-len real tokens")
    parser.add_argument("--variants", nargs="+", choices=sorted(SWITCHES), help="our variants (default per device)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per variant and round")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per variant before the first round")
    parser.add_argument("--repeats", type=int, default=3, help="rounds; tokens/s is their median")
    parser.add_argument("--precision", choices=["fp32", "bf16", "auto"], default="auto")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    parser.add_argument("--peak-tflops", type=float, default=0.0, help="device peak; 0 looks the GPU up")
    parser.add_argument("--memory-steps", type=int, default=3, help="CPU: steps of each memory probe process")
    parser.add_argument("--no-memory", action="store_true", help="skip the CPU memory probes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prompt-len", type=int, default=32, help="gpt2: prompt tokens of the generation benchmark")
    parser.add_argument("--new-tokens", type=int, default=64, help="gpt2: tokens each prompt is continued by")
    parser.add_argument("--generate-batch", type=int, default=4, help="gpt2: prompts generated together")
    parser.add_argument("--no-generate", action="store_true", help="gpt2: skip the generation benchmark")
    # Internal: run one variant's (or, gpt2, one model's) CPU memory probe and print its JSON.
    parser.add_argument("--memory-probe", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.vocab_size is None:
        args.vocab_size = {"gpt2": 50257, "t5": 32128}.get(args.model, 30522)
    sizes = {"bert": SIZES, "gpt2": {"tiny": None, "small": None}, "t5": {"tiny": None, "small": None, "base": None}}
    sizes = sizes[args.model]
    if args.config not in sizes:
        parser.error(f"--config {args.config} is not a {args.model} size; choose from {', '.join(sorted(sizes))}")
    return args


def cpu_supports_bf16() -> bool:
    """True when this CPU has native bf16 matmuls (AVX512-BF16 or AMX); elsewhere bf16 is emulated and slower."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def pick_precision(requested: str, device: torch.device) -> str:
    """auto: bf16 on GPUs that support it; on a CPU only where it has native bf16 matmuls (AMX / AVX512-BF16)."""
    if requested != "auto":
        return requested
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if cpu_supports_bf16() else "fp32"


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def build_runners(args, device, precision, run_dir: Path) -> list:
    config = bert_config(args)
    vocab = Vocab(size=args.vocab_size, **VOCAB_IDS)
    runners = []
    variants = args.variants or DEFAULT_VARIANTS[device.type]
    for name in variants:
        torch.manual_seed(args.seed)
        runners.append(
            OursRunner(name, config, vocab, device, precision, SWITCHES[name], args.batch_size, run_dir / name)
        )
    torch.manual_seed(args.seed)
    runners.append(TransformersRunner("transformers", config, vocab, device, precision, args.batch_size))
    if args.reference_compile:
        graphs = any("cudagraphs" in name for name in variants)
        for name, mode in REFERENCE_COMPILE.items():
            if graphs or "cudagraphs" not in name:
                torch.manual_seed(args.seed)
                runners.append(TransformersRunner(name, config, vocab, device, precision, args.batch_size, True, mode))
    if args.large_batch:
        best = variants[-1]
        large = args.large_batch
        torch.manual_seed(args.seed)
        runners.append(
            OursRunner(f"{best}@{large}", config, vocab, device, precision, SWITCHES[best], large, run_dir / "large")
        )
        torch.manual_seed(args.seed)
        runners.append(TransformersRunner(f"transformers@{large}", config, vocab, device, precision, large))
        if args.reference_compile:
            torch.manual_seed(args.seed)
            runners.append(
                TransformersRunner(f"transformers+compile@{large}", config, vocab, device, precision, large, True)
            )
    return runners


def benchmark(args, device: torch.device, precision: str) -> dict:
    vocab = Vocab(size=args.vocab_size, **VOCAB_IDS)
    masking = masking_from_config(MlmConfig(), vocab)
    with tempfile.TemporaryDirectory() as tmp:
        runners = build_runners(args, device, precision, Path(tmp))
        count = args.warmup + args.steps
        cpu_batches = {}
        for size in sorted({r.batch_size for r in runners}):
            cpu_batches[size] = make_batches(args, vocab, masking, count, size)
        # Each runner's batches as its data loader hands them over, pinned for an asynchronous copy to a GPU.
        data = {r.name: [pin(r.prepare(b), device) for b in cpu_batches[r.batch_size]] for r in runners}
        tokens = {
            size: sum(int(b["attention_mask"].sum()) for b in batches[args.warmup :])
            for size, batches in cpu_batches.items()
        }
        for runner in runners:  # warm-up, compilation included
            for batch in data[runner.name][: args.warmup]:
                runner.step(batch)
            synchronize(device)
        rounds = {r.name: [] for r in runners}
        memory = {r.name: 0 for r in runners}
        for round_index in range(args.repeats):
            order = runners[round_index % len(runners) :] + runners[: round_index % len(runners)]
            for runner in order:  # a rotating order, so that no runner always follows the same one
                synchronize(device)
                if device.type == "cuda":
                    before = torch.cuda.memory_allocated(device)
                    torch.cuda.reset_peak_memory_stats(device)
                start = time.perf_counter()
                for batch in data[runner.name][args.warmup :]:
                    runner.step(batch)
                synchronize(device)
                rounds[runner.name].append(tokens[runner.batch_size] / (time.perf_counter() - start))
                if device.type == "cuda":
                    memory[runner.name] = max(memory[runner.name], torch.cuda.max_memory_allocated(device) - before)
        peak = peak_tflops(device, precision, True, args.peak_tflops)
        flops = runners[0].flops
        result = {}
        for runner in runners:
            tokens_per_s = statistics.median(rounds[runner.name])
            entry = {
                "batch_size": runner.batch_size,
                "tokens_per_s": round(tokens_per_s, 1),
                "tokens_per_s_rounds": [round(x, 1) for x in rounds[runner.name]],
                "step_ms": round(1000 * tokens[runner.batch_size] / args.steps / tokens_per_s, 2),
                "parameters": runner.num_parameters,
            }
            if device.type == "cuda":
                entry["peak_memory_mb"] = round(memory[runner.name] / 2**20, 1)
            if peak:
                entry["mfu"] = round(flops.per_token(args.seq_len) * tokens_per_s / (peak * 1e12), 4)
            result[runner.name] = entry
        return {"peak_tflops": peak, "flops_per_token": flops.per_token(args.seq_len), "runs": result}


def memory_probe(args: argparse.Namespace) -> dict:
    """CPU peak resident set of a few training steps of one variant, less the resident set before them (MiB)."""
    device = torch.device("cpu")
    args.steps, args.warmup = args.memory_steps, 0
    vocab = Vocab(size=args.vocab_size, **VOCAB_IDS)
    masking = masking_from_config(MlmConfig(), vocab)
    batches = make_batches(args, vocab, masking, args.memory_steps, args.batch_size)
    config = bert_config(args)
    torch.manual_seed(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        if args.memory_probe == "transformers":
            runner = TransformersRunner("transformers", config, vocab, device, args.precision, args.batch_size)
        else:
            switches = SWITCHES[args.memory_probe]
            runner = OursRunner("probe", config, vocab, device, args.precision, switches, args.batch_size, Path(tmp))
        prepared = [runner.prepare(b) for b in batches]
        baseline_kib = _memory_kib("VmRSS")
        for batch in prepared:
            runner.step(batch)
    return {"peak_memory_mb": round((_memory_kib("VmHWM") - baseline_kib) / 1024, 1)}


def _memory_kib(field: str) -> int:
    """VmRSS (now) or VmHWM (peak) of this process in KiB. ``getrusage``'s ru_maxrss is the fallback only: Linux
    carries it over from the parent through fork + exec, so a child started by a large parent reads too high."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # Linux: KiB


def cpu_memory(argv: list[str], names: list[str], precision: str) -> dict[str, float | None]:
    """Run each variant's memory probe in its own process, so that none sees another's allocations."""
    peaks = {}
    for name in names:
        command = [sys.executable, __file__, *argv, "--precision", precision, "--memory-probe", name]
        done = subprocess.run(command, capture_output=True, text=True)
        peaks[name] = json.loads(done.stdout)["peak_memory_mb"] if done.returncode == 0 else None
    return peaks


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.model in ("gpt2", "t5"):
        run = __import__(f"bench_{args.model}").run
        if args.memory_probe and args.precision == "auto":
            args.precision = "fp32"
        print(json.dumps(run(args, argv), indent=None if args.memory_probe else 2))
        return {}
    if args.memory_probe:
        if args.precision == "auto":
            args.precision = "fp32"
        print(json.dumps(memory_probe(args)))
        return {}
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"error: --device cuda, but this torch ({torch.__version__}) sees no CUDA device")
    wants_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda" if wants_cuda else "cpu")
    if args.large_batch is None:
        args.large_batch = 256 if device.type == "cuda" else 0
    precision = pick_precision(args.precision, device)
    result = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "load_average_before": [round(x, 2) for x in os.getloadavg()],
        "config": args.config,
        "vocab_size": args.vocab_size,
        "seq_len": args.seq_len,
        "batch_size": args.batch_size,
        "min_fill": args.min_fill,
        "steps": args.steps,
        "warmup": args.warmup,
        "repeats": args.repeats,
        "precision": precision,
    }
    result.update(benchmark(args, device, precision))
    result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    runs = result["runs"]
    if device.type == "cpu" and not args.no_memory:
        names = [n for n in runs if n in SWITCHES or n == "transformers"]
        for name, peak in cpu_memory(argv, names, precision).items():
            runs[name]["peak_memory_mb"] = peak
    # "ours" is what plm-train does by default here: fused optimizer kernels, no compilation, padded rows.
    result["ours"] = runs["fused"] if "fused" in runs else runs[next(iter(runs))]
    result["transformers"] = runs["transformers"]
    result["speedup"] = round(result["ours"]["tokens_per_s"] / runs["transformers"]["tokens_per_s"], 2)
    result["speedups"] = {
        name: round(entry["tokens_per_s"] / runs["transformers"]["tokens_per_s"], 2)
        for name, entry in runs.items()
        if not name.startswith("transformers") and entry["batch_size"] == args.batch_size
    }
    if "transformers+compile" in runs:
        result["speedups_vs_compiled_reference"] = compiled_speedups(runs, args.batch_size)
    if args.large_batch:
        best = next(n for n in runs if n.endswith(f"@{args.large_batch}") and not n.startswith("transformers"))
        reference = runs[f"transformers@{args.large_batch}"]["tokens_per_s"]
        result["speedups"][best] = round(runs[best]["tokens_per_s"] / reference, 2)
        if f"transformers+compile@{args.large_batch}" in runs:
            compiled = runs[f"transformers+compile@{args.large_batch}"]["tokens_per_s"]
            result["speedups_vs_compiled_reference"][best] = round(runs[best]["tokens_per_s"] / compiled, 2)
    ours_memory, their_memory = result["ours"].get("peak_memory_mb"), runs["transformers"].get("peak_memory_mb")
    if ours_memory and their_memory:
        result["memory_ratio"] = round(ours_memory / their_memory, 2)
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
