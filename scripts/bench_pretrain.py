"""Pretraining throughput and peak memory: our BERT + MLM objective against ``transformers.BertForMaskedLM``.

Both train on the same masked batches (same ``mlm_labels``) with the same AdamW settings, step for step in one
process: each step runs one model then the other, alternating which goes first, and the warm-up steps are not
timed. Throughput counts non-padding tokens through forward, backward and the optimizer step.

Peak memory: on CUDA, ``torch.cuda.max_memory_allocated`` over the timed steps, less what was allocated before
them. On CPU, each model runs a few steps again in a fresh process and reports its peak resident set (``VmHWM``
in ``/proc/self/status``) less its resident set before the first step: gradients, optimizer state, activations.

    python scripts/bench_pretrain.py --config tiny
    python scripts/bench_pretrain.py --config base --seq-len 128 --precision bf16   # on a GPU: MFU as well
    python scripts/bench_pretrain.py --model gpt2 --config tiny    # GPT-2 against GPT2LMHeadModel, + generation
    python scripts/bench_pretrain.py --model t5 --config small --batch-size 8    # T5 against T5ForConditionalGeneration

Prints one JSON object. Needs ``transformers`` (the ``test`` extra). ``--model gpt2`` runs ``bench_gpt2.py``;
``--model t5`` takes its runners and batches from ``bench_t5.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import subprocess
import sys
import time

import torch

from plm_toolkit.data.vocab import Vocab
from plm_toolkit.models.bert import Bert, BertConfig
from plm_toolkit.objectives.base import normalized_loss
from plm_toolkit.objectives.mlm import MlmConfig
from plm_toolkit.registry import OBJECTIVES
from plm_toolkit.training.precision import cpu_supports_bf16

# (layers, hidden, heads, intermediate): Google's BERT-Tiny and BERT-Base.
SIZES = {"tiny": (2, 128, 2, 512), "base": (12, 768, 12, 3072)}
# bert-base-uncased's special ids.
VOCAB_IDS = dict(pad_id=0, unk_id=100, cls_id=101, sep_id=102, mask_id=103)


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
    parser.add_argument("--steps", type=int, default=10, help="timed steps per model")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per model before the timed ones")
    parser.add_argument("--precision", choices=["fp32", "bf16", "auto"], default="auto")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="accelerator peak (H100 bf16 dense: 989)")
    parser.add_argument("--memory-steps", type=int, default=3, help="CPU: steps of each memory probe process")
    parser.add_argument("--no-memory", action="store_true", help="skip the CPU memory probes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prompt-len", type=int, default=32, help="gpt2: prompt tokens of the generation benchmark")
    parser.add_argument("--new-tokens", type=int, default=64, help="gpt2: tokens each prompt is continued by")
    parser.add_argument("--generate-batch", type=int, default=4, help="gpt2: prompts generated together")
    parser.add_argument("--no-generate", action="store_true", help="gpt2: skip the generation benchmark")
    # Internal: run one model's CPU memory probe and print its JSON.
    parser.add_argument("--memory-probe", choices=["ours", "transformers"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.vocab_size is None:
        args.vocab_size = {"gpt2": 50257, "t5": 32128}.get(args.model, 30522)
    sizes = {"bert": SIZES, "gpt2": {"tiny": None, "small": None}, "t5": {"tiny": None, "small": None, "base": None}}
    sizes = sizes[args.model]
    if args.config not in sizes:
        parser.error(f"--config {args.config} is not a {args.model} size; choose from {', '.join(sorted(sizes))}")
    return args


def bert_config(args: argparse.Namespace) -> BertConfig:
    layers, hidden, heads, intermediate = SIZES[args.config]
    return BertConfig(
        vocab_size=args.vocab_size,
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        intermediate_size=intermediate,
        max_position_embeddings=max(512, args.seq_len),
    )


def pick_precision(requested: str, device: torch.device, runner=None, batches=None) -> str:
    """auto: bf16 on GPUs that support it. On CPU, bf16 only where a whole training step of our model is faster
    in it: a bf16 matmul alone wins wherever AMX or AVX512-BF16 exist, but the casts around it and the fp32
    softmax over the vocabulary can eat the gain (they do for the tiny config)."""
    if requested != "auto":
        return requested
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    if not cpu_supports_bf16():  # emulated bf16 is slower; a timing on a busy machine could say otherwise
        return "fp32"
    seconds = {}
    for precision in ("fp32", "bf16", "fp32", "bf16"):  # the first round warms the kernels up
        start = time.perf_counter()
        try:
            runner.step(batches[0], autocast_factory(precision, device))
        except RuntimeError:  # no bf16 kernels on this CPU
            return "fp32"
        seconds[precision] = time.perf_counter() - start
    return "bf16" if seconds["bf16"] < 0.9 * seconds["fp32"] else "fp32"


def make_batches(args: argparse.Namespace, vocab: Vocab, transform, count: int) -> list[dict[str, torch.Tensor]]:
    """Masked batches of [CLS] tokens [SEP] rows, 80-100% of seq_len long, padded to seq_len."""
    generator = torch.Generator().manual_seed(args.seed)
    first_word = max(vocab.special_ids) + 1
    batches = []
    for index in range(count):
        b, t = args.batch_size, args.seq_len
        ids = torch.randint(first_word, args.vocab_size, (b, t), generator=generator)
        lengths = torch.randint(int(0.8 * t), t + 1, (b,), generator=generator)
        positions = torch.arange(t).expand(b, t)
        attention_mask = (positions < lengths[:, None]).long()
        ids[:, 0] = vocab.cls_id
        ids[torch.arange(b), lengths - 1] = vocab.sep_id
        ids[attention_mask == 0] = vocab.pad_id
        special = ((ids == vocab.cls_id) | (ids == vocab.sep_id) | (attention_mask == 0)).long()
        batch = {
            "input_ids": ids,
            "attention_mask": attention_mask,
            "token_type_ids": torch.zeros_like(ids),
            "special_tokens_mask": special,
        }
        batches.append(transform(batch, [args.seed * 1_000_003 + index * b + row for row in range(b)]))
    return batches


class OursRunner:
    """Our Bert with the registered ``mlm`` objective (its head runs only at the masked positions)."""

    name = "ours"

    def __init__(self, config: BertConfig, vocab: Vocab, device: torch.device):
        self.model = Bert(config).to(device).train()
        self.objective = OBJECTIVES.get("mlm").builder(MlmConfig(), self.model, vocab).to(device).train()
        params = [*self.model.parameters(), *self.objective.parameters()]
        self.optimizer = make_optimizer(params, device)
        self.num_parameters = sum(p.numel() for p in params)

    def batch_transform(self):
        return self.objective.batch_transform()

    def step(self, batch: dict[str, torch.Tensor], autocast) -> None:
        with autocast():
            out = self.objective(self.model, batch)
        # The loop divides loss sums by the global target count; here one batch is the whole window.
        loss = normalized_loss(out, {k: float(v) for k, v in self.objective.target_counts(batch).items()})
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


class TransformersRunner:
    """``transformers.BertForMaskedLM`` on the same config, trained through its ``labels`` argument."""

    name = "transformers"

    def __init__(self, config: BertConfig, vocab: Vocab, device: torch.device):
        import transformers

        hf_config = transformers.BertConfig(
            vocab_size=config.vocab_size,
            hidden_size=config.hidden_size,
            num_hidden_layers=config.num_layers,
            num_attention_heads=config.num_heads,
            intermediate_size=config.intermediate_size,
            max_position_embeddings=config.max_position_embeddings,
            pad_token_id=vocab.pad_id,
        )
        self.model = transformers.BertForMaskedLM(hf_config).to(device).train()
        self.optimizer = make_optimizer(list(self.model.parameters()), device)
        self.num_parameters = sum(p.numel() for p in self.model.parameters())

    def inputs(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {
            "input_ids": batch["input_ids"],
            "attention_mask": batch["attention_mask"],
            "token_type_ids": batch["token_type_ids"],
            "labels": batch["mlm_labels"],
        }

    def step(self, batch: dict[str, torch.Tensor], autocast) -> None:
        with autocast():
            out = self.model(**self.inputs(batch))
        out.loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def make_optimizer(params: list[torch.nn.Parameter], device: torch.device) -> torch.optim.Optimizer:
    # The same settings for both models; fused kernels exist for CPU and CUDA.
    return torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, fused=True)


def autocast_factory(precision: str, device: torch.device):
    if precision == "bf16":
        return lambda: torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bert_suite(args: argparse.Namespace):
    """(config, vocab, our runner class, transformers' runner class, batch maker) of --model bert."""
    return bert_config(args), Vocab(size=args.vocab_size, **VOCAB_IDS), OursRunner, TransformersRunner, make_batches


def suite(args: argparse.Namespace):
    if args.model == "t5":
        from bench_t5 import t5_suite

        return t5_suite(args)
    return bert_suite(args)


def benchmark(args: argparse.Namespace, device: torch.device) -> dict:
    torch.manual_seed(args.seed)
    config, vocab, ours_class, theirs_class, batch_maker = suite(args)
    ours, theirs = ours_class(config, vocab, device), theirs_class(config, vocab, device)
    cpu_batches = batch_maker(args, vocab, ours.batch_transform(), args.warmup + args.steps)
    batches = [{key: value.to(device) for key, value in batch.items()} for batch in cpu_batches]
    precision = pick_precision(args.precision, device, ours, batches)
    autocast = autocast_factory(precision, device)

    seconds = {ours.name: 0.0, theirs.name: 0.0}
    memory = {ours.name: 0, theirs.name: 0}
    tokens = 0
    for index, batch in enumerate(batches):
        timed = index >= args.warmup
        tokens += count_tokens(batch) if timed else 0
        # Alternate the order so that neither model always runs on a cache the other warmed.
        for runner in (ours, theirs) if index % 2 == 0 else (theirs, ours):
            synchronize(device)
            if device.type == "cuda":
                before = torch.cuda.memory_allocated(device)
                torch.cuda.reset_peak_memory_stats(device)
            start = time.perf_counter()
            runner.step(batch, autocast)
            synchronize(device)
            if timed:
                seconds[runner.name] += time.perf_counter() - start
                if device.type == "cuda":
                    memory[runner.name] = max(memory[runner.name], torch.cuda.max_memory_allocated(device) - before)

    result = {"precision": precision}
    for runner in (ours, theirs):
        tokens_per_s = tokens / seconds[runner.name]
        entry = {
            "tokens_per_s": round(tokens_per_s, 1),
            "step_ms": round(1000 * seconds[runner.name] / args.steps, 2),
            "parameters": runner.num_parameters,
        }
        if device.type == "cuda":
            entry["peak_memory_mb"] = round(memory[runner.name] / 2**20, 1)
            # Model FLOPs utilization: 6 N FLOPs per token for forward + backward (Kaplan et al. 2020, 2.1).
            entry["mfu"] = round(6 * runner.num_parameters * tokens_per_s / (args.peak_tflops * 1e12), 4)
        result[runner.name] = entry
    return result


def memory_probe(args: argparse.Namespace) -> dict:
    """CPU peak resident set of a few training steps of one model, less the resident set before them (MiB)."""
    torch.manual_seed(args.seed)
    device, precision = torch.device("cpu"), args.precision  # the parent passes the precision it picked
    config, vocab, ours_class, theirs_class, batch_maker = suite(args)
    transform = ours_class(config, vocab, device).batch_transform()
    batches = batch_maker(args, vocab, transform, args.memory_steps)
    runner = (ours_class if args.memory_probe == "ours" else theirs_class)(config, vocab, device)
    baseline_kib = _memory_kib("VmRSS")
    for batch in batches:
        runner.step(batch, autocast_factory(precision, device))
    return {"peak_memory_mb": round((_memory_kib("VmHWM") - baseline_kib) / 1024, 1)}


def count_tokens(batch: dict[str, torch.Tensor]) -> int:
    """Non-padding tokens of a batch: the inputs, plus the decoder's targets for an encoder-decoder."""
    decoder = batch.get("decoder_attention_mask")
    return int(batch["attention_mask"].sum()) + (int(decoder.sum()) if decoder is not None else 0)


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


def cpu_memory(argv: list[str], precision: str) -> dict[str, float | None]:
    """Run each model's memory probe in its own process, so that neither sees the other's allocations."""
    peaks = {}
    for name in ("ours", "transformers"):
        command = [sys.executable, __file__, *argv, "--precision", precision, "--memory-probe", name]
        done = subprocess.run(command, capture_output=True, text=True)
        peaks[name] = json.loads(done.stdout)["peak_memory_mb"] if done.returncode == 0 else None
    return peaks


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.model == "gpt2":
        from bench_gpt2 import run

        if args.memory_probe and args.precision == "auto":
            args.precision = "fp32"
        print(json.dumps(run(args, argv), indent=None if args.memory_probe else 2))
        return
    if args.memory_probe:
        if args.precision == "auto":
            args.precision = "fp32"
        print(json.dumps(memory_probe(args)))
        return
    wants_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda" if wants_cuda else "cpu")
    result = {
        "model": args.model,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "threads": torch.get_num_threads(),
        "config": args.config,
        "vocab_size": args.vocab_size,
        "seq_len": args.seq_len,
        "batch_size": args.batch_size,
        "steps": args.steps,
        "warmup": args.warmup,
    }
    result.update(benchmark(args, device))
    if device.type == "cpu" and not args.no_memory:
        for name, peak in cpu_memory(argv, result["precision"]).items():
            result[name]["peak_memory_mb"] = peak
    result["speedup"] = round(result["ours"]["tokens_per_s"] / result["transformers"]["tokens_per_s"], 2)
    ours_memory, their_memory = result["ours"].get("peak_memory_mb"), result["transformers"].get("peak_memory_mb")
    if ours_memory and their_memory:
        result["memory_ratio"] = round(ours_memory / their_memory, 2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
