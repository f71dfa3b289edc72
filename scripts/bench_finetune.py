"""Fine-tuning speed: ``plm-finetune`` against transformers' ``Trainer`` on the same SST-2 examples, side by side.

All sides fine-tune the same local Hugging Face checkpoint (all-MiniLM-L6-v2 by default) on the first
``--train-samples`` rows of SST-2's train.tsv for ``--epochs`` epochs, batch ``--batch-size``, AdamW at ``--lr``
with 10% linear warm-up, weight decay 0.01, gradient clipping 1.0, sequences cut at ``--max-seq-len``, and
evaluate on the whole dev.tsv. Each runs in its own process with the same thread count. Reported: training
seconds (ours: the loop's ``elapsed_s``, data loading included, evaluation excluded; the Trainer: its
``train_runtime``), seconds per step, dev accuracy. ``ours`` runs plm-finetune's defaults (fused AdamW, batches
grouped by length); ``--variants`` adds runs with one switch turned back (``ungrouped``, ``for_loop``).

The reference runs at its best as well as at its defaults: ``transformers_grouped`` is the Trainer with its own
length grouping (``train_sampling_strategy="group_by_length"``; ``group_by_length=True`` before transformers 5),
``transformers`` the Trainer's default random batches; both use fused AdamW (``optim="adamw_torch_fused"``).
``--trainer-sides`` picks which of the two run.

    bash /work/shared/data/models/fetch-minilm.sh /work/cache/minilm
    python scripts/bench_finetune.py --model /work/cache/minilm --data /work/shared/data/glue/SST-2

Prints one JSON object; ``time_ratios`` holds ours over each Trainer side's training time (``vs_grouped``: the
fair comparison; ``vs_default``) and the ``ungrouped`` variant over the default Trainer (``ungrouped_vs_default``:
both without grouping). Needs ``transformers`` and ``accelerate`` (the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from plm_toolkit.training.logging import METRICS_FILE, read_metrics

# Our variants: plm-finetune overrides that turn one speed switch back.
VARIANTS = {
    "ours": [],
    "ungrouped": ["trainer.group_by_length=false"],
    "for_loop": ["hardware.optimizer_implementation=for_loop"],
}
# The Trainer's sides: the JSON key -> whether its batches are grouped by length.
TRAINER_SIDES = {"transformers_grouped": True, "transformers": False}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a local Hugging Face BERT-family folder")
    parser.add_argument("--data", required=True, help="folder with SST-2's train.tsv and dev.tsv")
    parser.add_argument("--train-samples", type=int, default=8000)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--max-seq-len", type=int, default=128)
    parser.add_argument("--threads", type=int, default=0, help="torch threads in each run (0: torch's default)")
    parser.add_argument("--variants", nargs="*", default=[], choices=sorted(set(VARIANTS) - {"ours"}))
    parser.add_argument(
        "--trainer-sides",
        nargs="*",
        default=["grouped", "default"],
        choices=["grouped", "default"],
        help="the Trainer runs: grouped by length (its best) and with its default random batches",
    )
    parser.add_argument("--skip-transformers", action="store_true", help="no Trainer run (as --trainer-sides)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--run-transformers", choices=sorted(TRAINER_SIDES), help=argparse.SUPPRESS)  # internal
    return parser.parse_args(argv)


def steps(args) -> int:
    return args.epochs * -(-args.train_samples // args.batch_size)


def run_ours(args, overrides: list[str], run_dir: Path) -> dict:
    data = Path(args.data)
    command = [
        sys.executable,
        "-m",
        "plm_toolkit.commands.finetune",
        "task=sst2",
        f"model.checkpoint={args.model}",
        f"data.train_file={data / 'train.tsv'}",
        f"data.validation_file={data / 'dev.tsv'}",
        f"data.max_train_samples={args.train_samples}",
        f"data.max_seq_len={args.max_seq_len}",
        f"trainer.max_steps={steps(args)}",
        "trainer.epochs=null",
        f"trainer.batch_size={args.batch_size}",
        f"trainer.seed={args.seed}",
        "trainer.log_every=50",
        "trainer.progress_bar=false",
        "trainer.tensorboard=false",
        f"optimizer.lr={args.lr}",
        "hardware=cpu",
        f"hardware.num_threads={args.threads}",
        f"hydra.run.dir={run_dir}",
        *overrides,
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"plm-finetune failed:\n{(done.stdout + done.stderr)[-3000:]}")
    records = read_metrics(run_dir / METRICS_FILE)
    train = [r for r in records if "lr" in r]
    seconds = train[-1]["elapsed_s"]
    accuracy = json.loads((run_dir / "eval_results.json").read_text())["accuracy"]
    return {"train_seconds": round(seconds, 3), "step_s": round(seconds / steps(args), 4), "accuracy": accuracy}


def run_transformers(args, grouped: bool) -> dict:
    """The Trainer in this process (started by ``main`` with ``--run-transformers SIDE``), its batches grouped by
    length or in its default random order."""
    import torch
    import transformers
    from datasets import Dataset

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.model)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(args.model, num_labels=2)

    def read(name: str, limit: int | None) -> Dataset:
        rows = (Path(args.data) / name).read_text().splitlines()[1:]
        rows = rows[:limit] if limit else rows
        texts, labels = zip(*(row.rsplit("\t", 1) for row in rows), strict=True)
        encoded = tokenizer(list(texts), truncation=True, max_length=args.max_seq_len)
        return Dataset.from_dict({**encoded, "labels": [int(x) for x in labels]})

    train, dev = read("train.tsv", args.train_samples), read("dev.tsv", None)
    # transformers 5 takes the warm-up ratio as a float warmup_steps; 4.x has warmup_ratio.
    fields = transformers.TrainingArguments.__dataclass_fields__
    warmup = {"warmup_ratio": 0.1} if "warmup_ratio" in fields else {"warmup_steps": 0.1}
    # transformers 5 picks the sampler by name; 4.x has a flag.
    if "train_sampling_strategy" in fields:
        sampling = {"train_sampling_strategy": "group_by_length" if grouped else "random"}
    else:
        sampling = {"group_by_length": grouped}
    with tempfile.TemporaryDirectory() as out:
        training_args = transformers.TrainingArguments(
            output_dir=out,
            per_device_train_batch_size=args.batch_size,
            per_device_eval_batch_size=args.batch_size,
            num_train_epochs=args.epochs,
            learning_rate=args.lr,
            **warmup,
            weight_decay=0.01,
            max_grad_norm=1.0,
            optim="adamw_torch_fused",
            lr_scheduler_type="linear",
            seed=args.seed,
            use_cpu=True,
            report_to=[],
            save_strategy="no",
            logging_strategy="no",
            disable_tqdm=True,
            dataloader_num_workers=0,
            **sampling,
        )
        trainer = transformers.Trainer(
            model=model,
            args=training_args,
            train_dataset=train,
            eval_dataset=dev,
            data_collator=transformers.DataCollatorWithPadding(tokenizer),
            compute_metrics=lambda p: {"accuracy": float((p.predictions.argmax(-1) == p.label_ids).mean())},
        )
        result = trainer.train()
        accuracy = trainer.evaluate()["eval_accuracy"]
    seconds = result.metrics["train_runtime"]
    return {
        "train_seconds": round(seconds, 3),
        "step_s": round(seconds / result.global_step, 4),
        "accuracy": accuracy,
        "optimizer": str(getattr(training_args.optim, "value", training_args.optim)),
        "sampling": sampling,
        "transformers": transformers.__version__,
    }


def trainer_sides(args) -> list[str]:
    """The JSON keys of the Trainer runs asked for."""
    if args.skip_transformers:
        return []
    asked = {"grouped": "transformers_grouped", "default": "transformers"}
    return [asked[side] for side in args.trainer_sides]


def ratios(result: dict) -> dict:
    """Ours over each Trainer side's training time, and the ungrouped variant over the ungrouped Trainer."""
    pairs = {
        "vs_grouped": ("ours", "transformers_grouped"),
        "vs_default": ("ours", "transformers"),
        "ungrouped_vs_default": ("ungrouped", "transformers"),
    }
    return {
        name: round(result[ours]["train_seconds"] / result[theirs]["train_seconds"], 3)
        for name, (ours, theirs) in pairs.items()
        if ours in result and theirs in result
    }


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.run_transformers:
        print(json.dumps(run_transformers(args, TRAINER_SIDES[args.run_transformers])))
        return {}
    result = {
        "model": args.model,
        "train_samples": args.train_samples,
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "steps": steps(args),
        "threads": args.threads or os.cpu_count(),
        "cpus": os.cpu_count(),
        "load_average_before": [round(x, 2) for x in os.getloadavg()],
    }
    with tempfile.TemporaryDirectory() as tmp:
        for name in ["ours", *args.variants]:
            result[name] = run_ours(args, VARIANTS[name], Path(tmp) / name)
            print(name, json.dumps(result[name]), file=sys.stderr)
    for side in trainer_sides(args):
        command = [sys.executable, __file__, *argv, "--run-transformers", side]
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}  # a local folder; nothing may come from a hub
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        if done.returncode != 0:
            raise SystemExit(f"the Trainer run ({side}) failed:\n{done.stderr[-3000:]}")
        result[side] = json.loads(done.stdout.strip().splitlines()[-1])
        print(side, json.dumps(result[side]), file=sys.stderr)
    if ratios(result):
        result["time_ratios"] = ratios(result)
    result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
