"""ELMo's measured numbers, each from the toolkit's own commands, printed as one JSON object:

1. pretrain: tiny ELMo (``model=elmo``) trained for a fixed time on WikiText-2 and evaluated with the full softmax
   on held-out text; the perplexity of each direction (``eval_bilm_forward_perplexity``, ``..._backward_...``).
   The shared data has WikiText-2's validation and test splits but not its training split, so the model trains on
   ``wiki.valid.tokens`` and is evaluated on ``wiki.test.tokens`` (word-level, <unk> already in the text).
2. ner: WNUT-17 entity F1 (conlleval) of three ways to use a pretrained model:
   ``elmo_features`` (finetune.mode=features over the ELMo of step 1), ``minilm_features`` (the same over frozen
   all-MiniLM-L6-v2) and ``minilm_full`` (fine-tuning the whole MiniLM, BERT's way).

    python scripts/bench_elmo.py --minutes 60 --ner-steps 3000          # the measured run (a quiet machine)
    python scripts/bench_elmo.py --minutes 2 --ner-steps 40 --ner-train-samples 400   # a smoke run

Every command it runs is printed in the JSON (``commands``) so that each number can be reproduced by hand. The
all-MiniLM-L6-v2 folder comes from ``bash ../shared/data/models/fetch-minilm.sh /work/cache/minilm``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from plm_toolkit.training.logging import METRICS_FILE, read_metrics

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "bench_elmo", help="run directories go here")
    parser.add_argument("--shared", type=Path, default=SHARED, help="the shared data folder")
    parser.add_argument("--minilm", type=Path, default=Path("/work/cache/minilm"), help="all-MiniLM-L6-v2 folder")
    parser.add_argument("--minutes", type=float, default=60.0, help="ELMo pretraining time budget")
    parser.add_argument("--pretrain-batch-size", type=int, default=32)
    parser.add_argument("--window", type=int, default=20, help="tokens per window (bilm-tf's unroll_steps)")
    parser.add_argument("--vocab-size", type=int, default=34000, help="softmax words (WikiText-2 has ~33,280)")
    parser.add_argument("--ner-steps", type=int, default=3000, help="optimizer steps of each NER run")
    parser.add_argument("--ner-batch-size", type=int, default=32)
    parser.add_argument("--ner-train-samples", type=int, default=0, help="use only the first N sentences (0: all)")
    parser.add_argument("--ner-eval", choices=["dev", "test"], default="test")
    parser.add_argument("--only", nargs="+", choices=["pretrain", "elmo", "minilm_features", "minilm_full"])
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    return parser.parse_args(argv)


def toolkit(command: str) -> list[str]:
    """plm-train / plm-finetune run by the interpreter running this script, so in whichever environment that is."""
    return [sys.executable, "-m", f"plm_toolkit.commands.{command}"]


def run(command: list[str], log: list[str]) -> float:
    log.append(" ".join(command))
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=sys.stderr)  # stdout is the JSON alone
    return time.perf_counter() - start


def last(records: list[dict], key: str) -> dict:
    found = [r for r in records if key in r]
    return found[-1] if found else {}


def pretrain(args, commands: list[str]) -> dict:
    run_dir = args.out / "elmo_wikitext2"
    shutil.rmtree(run_dir, ignore_errors=True)
    wikitext = args.shared / "wikitext2"
    seconds = run(
        [
            *toolkit("train"),
            "model=elmo",
            "data=text_files",
            f"data.train_files=[{wikitext / 'wiki.valid.tokens'}]",
            f"data.validation_files=[{wikitext / 'wiki.test.tokens'}]",
            f"data.max_seq_len={args.window}",
            f"data.tokenizer.vocab_size={args.vocab_size}",
            f"trainer.batch_size={args.pretrain_batch_size}",
            f"trainer.time_budget={args.minutes / 60}",
            "trainer.max_steps=1000000",
            "trainer.eval_every=1000000000",  # once, at the end
            "trainer.eval_batches=0",
            "trainer.save_every=0",
            "trainer.log_every=50",
            "optimizer.lr=2e-3",
            "optimizer.schedule=constant",
            "optimizer.warmup_steps=200",
            f"hardware.device={args.device}",
            "hardware.precision=fp32",
            f"hydra.run.dir={run_dir}",
        ],
        commands,
    )
    records = read_metrics(run_dir / METRICS_FILE)
    final = last(records, "eval_bilm_loss")
    return {
        "run_dir": str(run_dir),
        "seconds": round(seconds, 1),
        "steps": final.get("step"),
        "eval_forward_perplexity": final.get("eval_bilm_forward_perplexity"),
        "eval_backward_perplexity": final.get("eval_bilm_backward_perplexity"),
        "eval_perplexity": final.get("eval_bilm_perplexity"),
        "train_loss_last": last(records, "lr").get("loss"),
    }


def ner(args, name: str, checkpoint: Path, mode: str, lr: float, commands: list[str]) -> dict:
    run_dir = args.out / f"ner_{name}"
    shutil.rmtree(run_dir, ignore_errors=True)
    data = args.shared / "ner"
    evaluation = data / ("emerging.test.annotated" if args.ner_eval == "test" else "emerging.dev.conll")
    command = [
        *toolkit("finetune"),
        "task=ner",
        f"model.checkpoint={checkpoint}",
        f"finetune.mode={mode}",
        f"data.train_file={data / 'wnut17train.conll'}",
        f"data.validation_file={evaluation}",
        "data.max_seq_len=128",
        f"trainer.max_steps={args.ner_steps}",
        "trainer.epochs=null",  # plm-finetune counts in epochs by default
        f"trainer.batch_size={args.ner_batch_size}",
        "trainer.log_every=50",
        f"optimizer.lr={lr}",
        f"hardware.device={args.device}",
        "hardware.precision=fp32",
        f"hydra.run.dir={run_dir}",
    ]
    if args.ner_train_samples:
        command.append(f"data.max_train_samples={args.ner_train_samples}")
    seconds = run(command, commands)
    results = json.loads((run_dir / "eval_results.json").read_text())
    return {"run_dir": str(run_dir), "seconds": round(seconds, 1), **{k: round(v, 4) for k, v in results.items()}}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    only = set(args.only or ["pretrain", "elmo", "minilm_features", "minilm_full"])
    commands: list[str] = []
    out: dict = {"eval_split": args.ner_eval}
    if "pretrain" in only:
        out["pretrain"] = pretrain(args, commands)
    elmo = args.out / "elmo_wikitext2"
    results = {}
    if "elmo" in only:
        results["elmo_features"] = ner(args, "elmo_features", elmo, "features", 1e-3, commands)
    if "minilm_features" in only:
        results["minilm_features"] = ner(args, "minilm_features", args.minilm, "features", 1e-3, commands)
    if "minilm_full" in only:
        results["minilm_full"] = ner(args, "minilm_full", args.minilm, "full", 5e-5, commands)
    out["ner"] = results
    out["commands"] = commands
    json.dump(out, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
