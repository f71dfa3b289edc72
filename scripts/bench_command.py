"""Training throughput through the command users run: ``plm-train`` itself, its own tokens/s and MFU read from
metrics.jsonl after warm-up, beside the transformers model of the same architecture on batches of the same shape.

    python scripts/bench_command.py                                   # BERT-Tiny on this CPU
    python scripts/bench_command.py --case bert_base_128 --case gpt2_small_1024     # on a GPU
    python scripts/bench_command.py --suite gpu                       # the four GPU configurations

Each variant of a case is one ``plm-train`` process (``python -m plm_toolkit.commands.train``) on the bundled
WikiText excerpt, repeated into a temporary corpus of ``--corpus-mb`` where a case needs more text; nothing is saved
or evaluated; it logs every ``--log-every`` steps (10, the command's default). Warm-up ends after ``--warmup-steps``
steps and after the log line whose steps compiled a graph; tokens/s is the real (non-padding) tokens of the log
windows after it over their wall seconds, and ``steps_wall_s`` those seconds. The compiled variants' ``compile_s`` and
``compiled_graphs`` are the run's own (metrics.jsonl). The reference (``transformers``) trains the same
architecture, vocabulary and batch shape (rows, width, and the share of real tokens the command's batches had)
with fused AdamW in this process, after ``--reference-warmup`` untimed steps. The speed switches of the command
(``hardware.compile``, ``hardware.unpad``) are the variants.

Prints one JSON object: the command line, device, and per case each variant's figures and ``speedup_vs_reference``.
The synthetic-batch harness (``bench_pretrain.py``) measures the training step alone; this one measures the command.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import torch
import yaml

REPO = Path(__file__).resolve().parents[1]
BUNDLED = REPO / "plm_toolkit" / "corpora" / "wikitext2"
EAGER = ["hardware.compile=false", "hardware.unpad=false"]
COMPILED = ["hardware.compile=true", "hardware.unpad=false"]
UNPADDED = ["hardware.compile=true", "hardware.unpad=true"]
WORKERS = "data.num_workers=4"


class Case(NamedTuple):
    # plm-train overrides of the run (model, objective, lengths, batch, hardware).
    overrides: list[str]
    # variant name -> the speed switches it adds.
    variants: dict[str, list[str]]
    # The transformers class the reference trains: bert, gpt2 or t5.
    reference: str
    # Megabytes of training text the case needs (the bundled excerpt is about 1).
    corpus_mb: float = 0.0
    steps: int = 60


# plm-train's default (hardware.compile=null) is eager for every objective on every device for now: the speed
# switches are the variants, so that a measured win can change that default (Objective.compiles_by_default).
SWITCHES = {"eager": EAGER, "compiled": COMPILED, "compiled+unpadded": UNPADDED}
# The GPU cases give the released vocabularies' sizes (model.vocab_size), so that embedding and output layer cost
# what they cost in those models: the tokenizer trained on the bundled corpus has 8,000 tokens.
CASES = {
    "bert_tiny_cpu": Case(
        ["model=bert_tiny", "objective=mlm", "data.max_seq_len=128", "trainer.batch_size=16", "hardware=cpu"],
        SWITCHES,
        "bert",
    ),
    "bert_base_128": Case(
        [
            "model=bert_base",
            "model.vocab_size=30522",
            "objective=mlm",
            "data.max_seq_len=128",
            "trainer.batch_size=256",
            "hardware=cuda_bf16",
        ],
        # Four data-loader workers take the batches' preparation (12-26 ms for 256 rows on one CPU thread, padded
        # and packed: scripts/bench_batches.py) off the step.
        # A compiled GPU variant costs 30-40 s of compilation.
        {"eager": EAGER, "eager+4workers": [*EAGER, WORKERS], "compiled+unpadded+4workers": [*UNPADDED, WORKERS]},
        "bert",
        corpus_mb=8,
        steps=40,
    ),
    "bert_base_512": Case(
        [
            "model=bert_base",
            "model.vocab_size=30522",
            "objective=mlm",
            "data.max_seq_len=512",
            "trainer.batch_size=64",
            "hardware=cuda_bf16",
        ],
        {"compiled+unpadded": UNPADDED},
        "bert",
        corpus_mb=8,
        steps=40,
    ),
    "gpt2_small_1024": Case(
        [
            "model=gpt2_small",
            "model.vocab_size=50257",
            "data.max_seq_len=1024",
            "trainer.batch_size=16",
            "hardware=cuda_bf16",
        ],
        {"eager": EAGER, "compiled": COMPILED},
        "gpt2",
        corpus_mb=8,
        steps=40,
    ),
    "t5_v1_1_base_512": Case(
        [
            "model=t5_v1_1_base",
            "model.vocab_size=32128",
            "objective=span_corruption",
            "data.max_seq_len=512",
            "trainer.batch_size=48",
            "hardware=cuda_bf16",
        ],  # fmt: skip
        {"eager": EAGER, "compiled": COMPILED},
        "t5",
        corpus_mb=8,
        steps=40,
    ),
}
SUITES = {"cpu": ["bert_tiny_cpu"], "gpu": ["bert_base_128", "gpt2_small_1024", "t5_v1_1_base_512", "bert_base_512"]}


def corpus(folder: Path, megabytes: float) -> list[str]:
    """The data overrides: the bundled excerpt, or it repeated into ``megabytes`` of text."""
    train, valid = BUNDLED / "train.txt", BUNDLED / "valid.txt"
    if megabytes > train.stat().st_size / 2**20:
        text = train.read_text(encoding="utf-8")
        repeats = int(megabytes * 2**20 // len(text.encode())) + 1
        train = folder / "train.txt"
        train.write_text("\n\n".join([text] * repeats), encoding="utf-8")
    return ["data=text_files", f"data.train_files=[{train}]", f"data.validation_files=[{valid}]"]


def run_variant(case: Case, switches: list[str], folder: Path, data: list[str], args) -> dict:
    """One plm-train process; its metrics after warm-up."""
    run_dir = folder / "run"
    command = [sys.executable, "-m", "plm_toolkit.commands.train", *case.overrides, *data, *switches]
    command += [f"trainer.max_steps={args.steps or case.steps}", f"trainer.log_every={args.log_every}"]
    command += ["trainer.eval_every=0"]
    command += ["trainer.eval_at_end=false", "trainer.save_every=0", "trainer.progress_bar=false"]
    command += [f"data.cache_dir={args.cache}", f"hydra.run.dir={run_dir}", *args.override]
    started = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout, cwd=folder)
        returncode, stdout, stderr = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as stopped:  # killed: what it logged so far still says where it was
        returncode, stdout, stderr = None, _text(stopped.stdout), _text(stopped.stderr)
    entry = {
        "command": " ".join(command[2:]),
        "exit": returncode,
        "process_s": round(time.perf_counter() - started, 1),
    }
    if args.logs:
        Path(args.logs).mkdir(parents=True, exist_ok=True)
        (Path(args.logs) / f"{folder.parent.name}.{folder.name}.log").write_text(stderr + stdout)
    metrics = run_dir / "metrics.jsonl"
    records = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else []
    records = [r for r in records if "lr" in r]
    if returncode != 0:
        why = (
            f"timed out after {args.timeout} s" if returncode is None else (stderr or stdout).strip().splitlines()[-1:]
        )
        return {**entry, "error": why, "steps_logged": len(records), **({"last_step": records[-1]} if records else {})}
    entry.update(after_warmup(records, args.warmup_steps))
    config = yaml.safe_load((run_dir / "checkpoints" / "last" / "config.yaml").read_text())
    entry["model"] = config["model"]
    return entry


def _text(output: bytes | str | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def median_run(entries: list[dict]) -> dict:
    """The run of median tokens/s (the lower middle one of an even count), with every run's tokens/s beside it."""
    timed = sorted((e for e in entries if e.get("tokens_per_s")), key=lambda e: e["tokens_per_s"])
    if len(entries) == 1 or not timed:
        return entries[0]
    return {**timed[(len(timed) - 1) // 2], "rounds_tokens_per_s": [e.get("tokens_per_s") for e in entries]}


def paired_speedups(runs: dict[str, list[dict]]) -> dict[str, dict]:
    """Each variant's tokens/s over eager's of the same round: the median and every round's."""
    out = {}
    for variant, entries in runs.items():
        pairs = zip(entries, runs["eager"], strict=True)
        ratios = [round(e["tokens_per_s"] / base["tokens_per_s"], 3) for e, base in pairs
                  if e.get("tokens_per_s") and base.get("tokens_per_s")]  # fmt: skip
        if variant != "eager" and ratios:
            out[variant] = {"median": statistics.median(ratios), "rounds": ratios}
    return out


def after_warmup(records: list[dict], warmup: int) -> dict:
    """tokens/s, step seconds and MFU over the steps after warm-up (and after the last step that compiled)."""
    compiled = [r["step"] for r, before in zip(records[1:], records, strict=False)
                if r.get("compiled_graphs", 0) > before.get("compiled_graphs", 0)]  # fmt: skip
    if records and records[0].get("compiled_graphs"):
        compiled.append(records[0]["step"])
    start = max([warmup, *compiled])
    # A record covers the steps since the one before (trainer.log_every): its step_s is their mean.
    previous = [0] + [r["step"] for r in records[:-1]]
    spans = {r["step"]: r["step"] - before for r, before in zip(records, previous, strict=True)}
    steady = [r for r in records if r["step"] - spans[r["step"]] >= start]  # windows that start after warm-up
    seconds = sum(r["step_s"] * spans[r["step"]] for r in steady)
    tokens = sum(r["tokens_per_s"] * r["step_s"] * spans[r["step"]] for r in steady)
    steps = sum(spans[r["step"]] for r in steady)
    out = {
        "tokens_per_s": round(tokens / seconds, 1) if seconds else None,
        "median_window_tokens_per_s": round(statistics.median(r["tokens_per_s"] for r in steady), 1)
        if steady
        else None,
        "steps_timed": steps,
        "steps_wall_s": round(seconds, 3),
        "first_timed_step": steady[0]["step"] - spans[steady[0]["step"]] + 1 if steady else None,
        "tokens_per_step": round(tokens / steps) if steps else None,
        "loss_first_last": [round(records[0]["loss"], 4), round(records[-1]["loss"], 4)] if records else None,
    }
    if steady and "mfu" in steady[-1]:
        out["mfu"] = round(statistics.mean(r["mfu"] for r in steady), 4)
    last = records[-1] if records else {}
    out.update({k: last[k] for k in ("compiled_graphs", "compile_s") if k in last})
    return out


def reference(case: Case, model: dict, shape: tuple[int, int, float], args, device: torch.device) -> dict:
    """The transformers model of the same architecture and vocabulary on batches of ``shape`` (rows, width, share of
    real tokens), in this process."""
    sys.path.insert(0, str(Path(__file__).parent))
    rows, width, fill = shape
    ns = argparse.Namespace(seed=0, vocab_size=int(model["vocab_size"]), seq_len=width, batch_size=rows,
                            min_fill=max(0.05, 2 * fill - 1), prompt_len=0, new_tokens=0)  # fmt: skip
    precision = "bf16" if "hardware=cuda_bf16" in case.overrides else "fp32"
    autocast = (lambda: torch.autocast(device.type, dtype=torch.bfloat16)) if precision == "bf16" else None
    runner, batches, tokens = reference_runner(case.reference, model, ns, device, precision, args)
    timed = 0.0
    for index, batch in enumerate(batches):
        batch = {k: v.to(device) for k, v in batch.items()}
        synchronize(device)
        start = time.perf_counter()
        runner(batch, autocast)
        synchronize(device)
        if index >= args.reference_warmup:
            timed += time.perf_counter() - start
    counted = sum(tokens(b) for b in batches[args.reference_warmup :])
    return {"tokens_per_s": round(counted / timed, 1), "rows": rows, "width": width, "fill": round(fill, 3)}


def reference_runner(kind: str, model: dict, ns, device: torch.device, precision: str, args):
    """(step(batch, autocast), CPU batches, tokens of a batch) of the transformers model for ``kind``."""
    count = args.reference_warmup + args.reference_steps
    if kind == "bert":
        from bert_runners import VOCAB_IDS, TransformersRunner, make_batches

        from plm_toolkit.data.tokenization.vocab import Vocab
        from plm_toolkit.models.bert import BertConfig
        from plm_toolkit.objectives.masking import masking_from_config
        from plm_toolkit.objectives.mlm import MlmConfig

        config = BertConfig(**{k: model[k] for k in ("vocab_size", "hidden_size", "num_layers", "num_heads",
                                                     "intermediate_size", "max_position_embeddings")})  # fmt: skip
        vocab = Vocab(size=ns.vocab_size, **VOCAB_IDS)
        runner = TransformersRunner("transformers", config, vocab, device, precision, ns.batch_size)
        batches = make_batches(ns, vocab, masking_from_config(MlmConfig(), vocab), count, ns.batch_size)
        return (lambda batch, _: runner.step(batch)), batches, lambda b: int(b["attention_mask"].sum())
    if kind == "gpt2":
        from bench_gpt2 import TransformersRunner, make_batches

        from plm_toolkit.models.gpt import GPT2Config

        config = GPT2Config(**{k: model[k] for k in ("vocab_size", "hidden_size", "num_layers", "num_heads",
                                                     "intermediate_size", "max_position_embeddings")})  # fmt: skip
        runner = TransformersRunner(config, device)
        return (
            (lambda b, autocast: runner.step(b, autocast or _nothing)),
            make_batches(ns, count),
            (lambda b: b["input_ids"][:, 1:].numel()),
        )
    from bench_t5 import TransformersRunner, make_batches

    from plm_toolkit.models.t5 import T5Config
    from plm_toolkit.objectives.span_noise import SpanCorruption

    config = T5Config(**{k: model[k] for k in ("vocab_size", "hidden_size", "num_layers", "num_heads", "head_size",
                                               "intermediate_size")})  # fmt: skip
    runner = TransformersRunner(config, device)
    # The command's vocabulary: its sentinels are the top 100 ids, as in the released one (pad 0, eos 1).
    sentinels = tuple(range(ns.vocab_size - 1, ns.vocab_size - 101, -1))
    transform = SpanCorruption(sentinels, 1, 0, decoder_start_id=0)
    batches = make_batches(ns, transform, count, tokens=ns.vocab_size)
    # The command counts the encoder's tokens (the attention mask of its batches), so the reference does too.
    return (lambda b, autocast: runner.step(b, autocast or _nothing)), batches, lambda b: int(b["attention_mask"].sum())


def _nothing():
    import contextlib

    return contextlib.nullcontext()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def batch_shape(case: Case, entry: dict, extra: list[str]) -> tuple[int, int, float]:
    """(rows, width, share of real tokens) of the command's batches, from its overrides (``extra`` last, as on its
    command line) and its tokens per step."""
    values = dict(o.split("=", 1) for o in [*case.overrides, *extra] if "=" in o)
    rows, width = int(values["trainer.batch_size"]), int(values["data.max_seq_len"])
    if case.reference == "t5":
        return rows, width, 1.0
    return rows, width, min(1.0, (entry.get("tokens_per_step") or rows * width) / (rows * width))


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", action="append", choices=sorted(CASES), help="a case (repeatable)")
    parser.add_argument("--suite", choices=sorted(SUITES), help="cpu or gpu: the cases of that suite")
    parser.add_argument("--variants", nargs="+", help="only these variants of each case")
    parser.add_argument("--steps", type=int, default=0, help="steps per variant (default: the case's)")
    parser.add_argument("--log-every", type=int, default=10, help="trainer.log_every of the runs (the default 10: "
                        "a log line reads the device back, so 1 keeps the host from preparing the next batch while "
                        "the device computes)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=1, help="runs of each variant, in turns; the median is kept")
    parser.add_argument("--warmup-steps", type=int, default=20, help="steps left out of the figures at least")
    parser.add_argument("--reference-steps", type=int, default=20)
    parser.add_argument("--reference-warmup", type=int, default=3)
    parser.add_argument("--no-reference", action="store_true", help="skip the transformers reference")
    parser.add_argument("--corpus-mb", type=float, default=None, help="override the cases' corpus size")
    parser.add_argument("--override", action="append", default=[], help="one more plm-train override (repeatable)")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds a variant's process may take")
    parser.add_argument("--threads", type=int, default=0, help="torch threads of the reference (0: default)")
    parser.add_argument(
        "--out", help="also write the JSON here (rewritten after each variant, so a killed run keeps it)"
    )
    parser.add_argument("--logs", help="a folder for each variant's console output")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.exit(2, f"{parser.prog}: error: --rounds {args.rounds}: expected 1 or more runs of each variant\n")
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    names = args.case or SUITES.get(args.suite or "cpu")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.threads:
        torch.set_num_threads(args.threads)
    result = {"command": " ".join(sys.argv), "device": torch.cuda.get_device_name() if device.type == "cuda" else
              "cpu", "torch": torch.__version__, "cores": os.cpu_count(), "cases": {}}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench_command-") as tmp:
        root = Path(tmp)
        args.cache = str(root / "cache")
        for name in names:
            case = CASES[name]
            folder = root / name
            folder.mkdir()
            data = corpus(folder, case.corpus_mb if args.corpus_mb is None else args.corpus_mb)
            variants = {v: s for v, s in case.variants.items() if not args.variants or v in args.variants}
            runs: dict[str, list[dict]] = {variant: [] for variant in variants}
            for round_index in range(args.rounds):  # the variants take turns: a busy spell hits all of them
                for variant, switches in variants.items():
                    where = folder / f"{variant}.{round_index}"
                    where.mkdir()
                    runs[variant].append(run_variant(case, switches, where, data, args))
                    print(f"{name} {variant}: {json.dumps(runs[variant][-1])[:300]}", file=sys.stderr, flush=True)
                    result["cases"][name] = {"overrides": case.overrides, "runs": runs}
                    write(result, args.out)
            entries = {variant: median_run(entries) for variant, entries in runs.items()}
            out = {"overrides": case.overrides, "variants": entries}
            if args.rounds > 1 and "eager" in runs:
                out["speedup_vs_eager_by_round"] = paired_speedups(runs)
            ok = [e for e in entries.values() if e.get("tokens_per_s")]
            if ok and not args.no_reference:
                shape = batch_shape(case, ok[0], args.override)
                try:
                    out["reference"] = reference(case, ok[0]["model"], shape, args, device)
                except Exception as failed:  # noqa: BLE001 - the command's figures stand without it
                    out["reference"] = {"error": repr(failed)[:500]}
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            if out.get("reference", {}).get("tokens_per_s"):
                out["speedup_vs_reference"] = {
                    v: round(e["tokens_per_s"] / out["reference"]["tokens_per_s"], 3) for v, e in entries.items()
                    if e.get("tokens_per_s")
                }  # fmt: skip
            result["cases"][name] = out
    print(write(result, args.out))
    return result


def write(result: dict, out: str | None) -> str:
    text = json.dumps(result, indent=1)
    if out:
        Path(out).write_text(text)
    return text


if __name__ == "__main__":
    main()
