"""Evaluation speed of Transformer-XL with memory reuse against re-encoding the context for every prediction.

Dai et al. (2019, section 3.2 and table 9) compare two ways to evaluate a language model whose every prediction
attends to the previous L tokens:
  * vanilla: encode the window of the last L tokens from scratch for every predicted token, then shift the window
    by one position (a fixed-context Transformer has nothing to carry over);
  * memory: encode a segment of S new tokens at once, attending to a memory of the L - S states cached from the
    previous segments, so each token is computed once (the longest attention length is again L).
Both run the same randomly initialised Transformer-XL, batch 1, in evaluation mode. The vanilla path is timed on
a few predicted tokens and extrapolated per token (one window forward each); the memory path on several segments
once the memory is full. Each path reports the median step, which keeps the numbers steady on a shared machine.
The paper reports up to 1,874x at L = 3,800 (363x at 800) on GPUs.

    python scripts/bench_memory_eval.py                       # lengths 128..3800 on this machine's device
    python scripts/bench_memory_eval.py --lengths 128 512 --device cpu

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

from plm_toolkit.models.transformer_xl import TransformerXL, TransformerXLConfig


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 256, 512, 800, 1600, 3800])
    parser.add_argument("--segment", type=int, default=64, help="new tokens per memory-path forward (S)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--inner", type=int, default=1024)
    parser.add_argument("--vocab-size", type=int, default=1000)
    parser.add_argument("--vanilla-tokens", type=int, default=3, help="predicted tokens timed on the vanilla path")
    parser.add_argument("--memory-segments", type=int, default=8, help="segments timed on the memory path")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument(
        "--threads", type=int, default=1, help="CPU threads (one keeps timings steady on a shared machine; 0 = torch's)"
    )
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device: torch.device) -> float:
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - start


@torch.inference_mode()
def vanilla_tokens_per_s(model, stream: torch.Tensor, length: int, count: int, device) -> float:
    """Predict tokens length, length + 1, ...: each from a fresh forward over the previous `length` tokens."""
    model(stream[:, :length], mem_len=0)  # warm-up
    seconds = []
    for t in range(count):
        window = stream[:, 1 + t : 1 + t + length]  # the window shifted by one position per prediction
        seconds.append(timed(lambda w=window: model(w, mem_len=0), device))
    return 1.0 / statistics.median(seconds)


@torch.inference_mode()
def memory_tokens_per_s(model, stream: torch.Tensor, length: int, segment: int, count: int, device) -> float:
    """Segments of `segment` new tokens over a memory of length - segment cached states."""
    segment = min(segment, length)
    mem_len = length - segment
    out = model(stream[:, :mem_len], mem_len=mem_len) if mem_len else None  # fill the memory
    memories = out.memories if out is not None else None
    start = mem_len
    seconds = []
    for _ in range(count + 1):  # the first segment is a warm-up
        piece = stream[:, start : start + segment]
        synchronize(device)
        step_start = time.perf_counter()
        out = model(piece, memories=memories, mem_len=mem_len)
        synchronize(device)
        seconds.append(time.perf_counter() - step_start)
        memories, start = out.memories, start + segment
    return segment / statistics.median(seconds[1:])


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    name = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cpu" and args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    config = TransformerXLConfig(
        vocab_size=args.vocab_size,
        hidden_size=args.hidden,
        num_layers=args.layers,
        num_heads=args.heads,
        head_size=args.hidden // args.heads,
        intermediate_size=args.inner,
        hidden_dropout=0.0,
        attention_dropout=0.0,
    )
    model = TransformerXL(config).to(device).eval()
    longest = max(args.lengths)
    need = longest + max(args.vanilla_tokens, (args.memory_segments + 1) * args.segment) + 1
    stream = torch.randint(0, args.vocab_size, (1, need), device=device)
    rows = []
    for length in sorted(args.lengths):
        try:
            memory = memory_tokens_per_s(model, stream, length, args.segment, args.memory_segments, device)
            vanilla = vanilla_tokens_per_s(model, stream, length, args.vanilla_tokens, device)
        except (torch.cuda.OutOfMemoryError, RuntimeError) as error:  # too long for this machine: report and stop
            rows.append({"attention_length": length, "error": str(error).splitlines()[0]})
            break
        rows.append(
            {
                "attention_length": length,
                "memory_tokens_per_s": round(memory, 2),
                "vanilla_tokens_per_s": round(vanilla, 3),
                "speedup": round(memory / vanilla, 1),
            }
        )
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)  # progress; stdout is the JSON object alone
    result = {
        "device": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"cpu ({torch.get_num_threads()} threads)",
        "model": {
            "layers": args.layers,
            "hidden": args.hidden,
            "heads": args.heads,
            "inner": args.inner,
            "parameters": sum(p.numel() for p in model.parameters()),
        },
        "segment": args.segment,
        "batch_size": 1,
        "results": rows,
    }
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
