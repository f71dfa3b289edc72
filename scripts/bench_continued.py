"""Continued pretraining, measured: task-adaptive pretraining (TAPT, Gururangan et al. 2020) of a released
checkpoint on SST-2, then fine-tuning from the continued and from the released weights; and a causal family
continued on other text.

TAPT: ``plm-train experiment=tapt model.checkpoint=<release> objective=mlm`` on the first ``--tapt-sentences``
sentences of SST-2's train.tsv (labels dropped, one sentence a line), ``--tapt-steps`` steps; the masked-LM loss
of ``--heldout`` held-out training sentences (fixed masks) before (the release, evaluated through a 1-step run at
lr 1e-30) and after. Then ``plm-finetune task=sst2`` from both, on ``--finetune-samples`` rows of train.tsv (by
default the rows after the TAPT sentences; ``--same-rows``: the TAPT sentences' own rows, as the paper's TAPT reads
the very training text it fine-tunes on), one epoch, evaluated on the whole dev.tsv, once per seed; accuracy mean,
standard deviation and each seed's.

Causal: a GPT-2-architecture checkpoint (``--gpt2``: a Hugging Face folder; by default one made here: plm-train
model=gpt2_tiny on the bundled WikiText-2 excerpt, exported with plm-export) continued on the tinyshakespeare text
(90% / 10% by characters); the held-out loss before and after.

    bash /work/shared/data/models/fetch-minilm.sh /tmp/minilm
    python scripts/bench_continued.py --model /tmp/minilm --data /work/shared/data

Prints one JSON object. Every number comes from the runs' metrics.jsonl and eval_results.json.
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

from plm_toolkit.core.resources import resource_path

QUIET = ["trainer.progress_bar=false", "trainer.tensorboard=false", "hardware=cpu", "trainer.log_every=10"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a released BERT-family Hugging Face folder")
    parser.add_argument("--data", required=True, help="the shared data folder (glue/SST-2, tinyshakespeare)")
    parser.add_argument("--gpt2", help="a GPT-2-architecture Hugging Face folder; default: made here")
    parser.add_argument("--tapt-sentences", type=int, default=4000)
    parser.add_argument("--heldout", type=int, default=400)
    parser.add_argument("--tapt-steps", type=int, default=150)
    parser.add_argument("--finetune-samples", type=int, default=2000)
    parser.add_argument("--same-rows", action="store_true", help="fine-tune on the TAPT sentences' own rows")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--max-seq-len", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32, help="TAPT's, fine-tuning's and the causal run's")
    parser.add_argument("--eval-samples", type=int, help="fine-tuning: evaluate on the first N dev rows (all)")
    parser.add_argument("--causal-steps", type=int, default=150)
    parser.add_argument("--release-steps", type=int, default=300, help="steps of the GPT-2 made here")
    parser.add_argument("--workdir", help="keep the runs here (default: a temporary folder)")
    return parser.parse_args(argv)


def command(name: str, *args: str, cwd: Path) -> float:
    """Run ``plm-<name>`` with ``args``; the seconds it took. A failure stops the benchmark with its output."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", f"plm_toolkit.commands.{name}", *args], cwd=cwd, capture_output=True, text=True,
        env={**os.environ, "TQDM_DISABLE": "1"},
    )  # fmt: skip
    if done.returncode != 0:
        sys.exit(f"plm-{name} {' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return time.perf_counter() - started


def last_eval(run_dir: Path, key: str = "eval_loss") -> float:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if key in r][-1][key]


def heldout_loss(root: Path, name: str, checkpoint: Path, common: list[str]) -> tuple[float, float]:
    """The held-out evaluation loss of ``checkpoint`` as it is (one step at lr 1e-30), and the seconds it took."""
    args = [f"model.checkpoint={checkpoint}", *common, "trainer.epochs=null", "trainer.max_steps=1"]
    args += ["trainer.eval_every=1", "optimizer.lr=1e-30", "trainer.save_every=0", f"hydra.run.dir={root / name}"]
    seconds = command("train", *args, cwd=root)
    return last_eval(root / name), seconds


def tapt(args: argparse.Namespace, root: Path) -> dict:
    rows = (Path(args.data) / "glue" / "SST-2" / "train.tsv").read_text().splitlines()
    header, rows = rows[0], rows[1:]
    sentences = [row.split("\t")[0].strip() for row in rows]
    train, heldout = root / "tapt_train.txt", root / "tapt_heldout.txt"
    train.write_text("\n".join(sentences[: args.tapt_sentences]) + "\n")
    heldout.write_text("\n".join(sentences[-args.heldout :]) + "\n")
    common = [
        "experiment=tapt", "objective=mlm", f"data.train_files=[{train}]", f"data.validation_files=[{heldout}]",
        f"data.max_seq_len={args.max_seq_len}", f"data.cache_dir={root / 'cache'}", "trainer.eval_batches=0",
        "trainer.grad_accum_steps=1", f"trainer.batch_size={args.batch_size}", *QUIET,
    ]  # fmt: skip
    before, before_s = heldout_loss(root, "tapt_before", Path(args.model), common)
    run_args = [
        f"model.checkpoint={args.model}",
        *common,
        "trainer.epochs=null",
        f"trainer.max_steps={args.tapt_steps}",
    ]
    run_args += [f"trainer.eval_every={args.tapt_steps}", f"hydra.run.dir={root / 'tapt'}"]
    tapt_s = command("train", *run_args, cwd=root)
    after = last_eval(root / "tapt")
    first = args.tapt_sentences if not args.same_rows else 0
    finetune_rows = rows[first : first + args.finetune_samples]
    (root / "sst2_train.tsv").write_text("\n".join([header, *finetune_rows]) + "\n")
    finetuned = {}
    eval_samples = [f"data.max_eval_samples={args.eval_samples}"] if args.eval_samples else []
    for side, checkpoint in (("released", Path(args.model)), ("continued", root / "tapt")):
        accuracies, seconds = [], 0.0
        for seed in args.seeds:
            run_dir = root / f"finetune_{side}_{seed}"
            seconds += command(
                "finetune", "task=sst2", f"model.checkpoint={checkpoint}", f"data.train_file={root / 'sst2_train.tsv'}",
                f"data.validation_file={Path(args.data) / 'glue' / 'SST-2' / 'dev.tsv'}",
                f"data.max_seq_len={args.max_seq_len}", "trainer.epochs=1", f"trainer.seed={seed}",
                f"trainer.batch_size={args.batch_size}", *eval_samples,
                f"hydra.run.dir={run_dir}", *QUIET, cwd=root,
            )  # fmt: skip
            accuracies.append(json.loads((run_dir / "eval_results.json").read_text())["accuracy"])
        finetuned[side] = {
            "accuracy_mean": statistics.mean(accuracies),
            "accuracy_std": statistics.stdev(accuracies) if len(accuracies) > 1 else 0.0,
            "accuracies": accuracies,
            "seconds": round(seconds, 1),
        }
    return {
        "checkpoint": str(args.model),
        "tapt_sentences": args.tapt_sentences,
        "tapt_steps": args.tapt_steps,
        "heldout_sentences": args.heldout,
        "heldout_mlm_loss_before": before,
        "heldout_mlm_loss_after": after,
        "tapt_seconds": round(tapt_s, 1),
        "evaluation_seconds": round(before_s, 1),
        "finetune_samples": args.finetune_samples,
        "finetune_eval_rows": args.eval_samples or "all 872",
        "max_seq_len": args.max_seq_len,
        "batch_size": args.batch_size,
        "finetune_on_tapt_rows": bool(args.same_rows),
        "seeds": args.seeds,
        "finetuned": finetuned,
        "accuracy_gain": finetuned["continued"]["accuracy_mean"] - finetuned["released"]["accuracy_mean"],
    }


def causal(args: argparse.Namespace, root: Path) -> dict:
    made = args.gpt2 is None
    gpt2 = Path(args.gpt2) if args.gpt2 else root / "gpt2_hf"
    made_s = 0.0
    if made:  # a small "release": GPT-2's architecture pretrained on the bundled WikiText-2 excerpt
        wiki = resource_path("corpora/wikitext2/train.txt")
        made_s = command(
            "train", "model=gpt2_tiny", "data=text_files", f"data.train_files=[{wiki}]",
            f"data.cache_dir={root / 'cache'}", "data.max_seq_len=128", "data.tokenizer.vocab_size=2000",
            f"trainer.max_steps={args.release_steps}", "trainer.batch_size=16", "optimizer.lr=3e-3",
            "trainer.eval_every=0",
            f"hydra.run.dir={root / 'gpt2_release'}", *QUIET, cwd=root,
        )  # fmt: skip
        made_s += command("export", str(root / "gpt2_release"), str(gpt2), cwd=root)
    text = (Path(args.data) / "tinyshakespeare" / "input.txt").read_text()
    cut = int(len(text) * 0.9)
    (root / "shakespeare_train.txt").write_text(text[:cut])
    (root / "shakespeare_heldout.txt").write_text(text[cut:])
    common = [
        "data=text_files", f"data.train_files=[{root / 'shakespeare_train.txt'}]",
        f"data.validation_files=[{root / 'shakespeare_heldout.txt'}]", "data.document_boundary=file",
        f"data.cache_dir={root / 'cache'}", "data.max_seq_len=128", f"trainer.batch_size={args.batch_size}",
        "trainer.eval_batches=0",
        *QUIET,
    ]  # fmt: skip
    before, _ = heldout_loss(root, "causal_before", gpt2, common)
    run_args = [f"model.checkpoint={gpt2}", *common, f"trainer.max_steps={args.causal_steps}"]
    run_args += [f"trainer.eval_every={args.causal_steps}", f"hydra.run.dir={root / 'causal'}"]
    seconds = command("train", *run_args, cwd=root)
    return {
        "checkpoint": f"gpt2_tiny pretrained here on WikiText-2 ({args.release_steps} steps)" if made else str(gpt2),
        "release_seconds": round(made_s, 1),
        "continued_on": "tinyshakespeare, 90% (held out: the last 10% by characters)",
        "steps": args.causal_steps,
        "heldout_loss_before": before,
        "heldout_loss_after": last_eval(root / "causal"),
        "seconds": round(seconds, 1),
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(args.workdir or scratch).resolve()
        root.mkdir(parents=True, exist_ok=True)
        result = {"tapt": tapt(args, root), "causal": causal(args, root)}
    result["total_seconds"] = round(time.perf_counter() - started, 1)
    result["command"] = " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])])
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
