"""make demo: pretrain the tiny BERT on the bundled corpus (experiment=demo_cpu), fine-tune it on the bundled SST-2
slice, fine-tune the same architecture from random weights the same way, and print what pretraining bought.

    python scripts/demo.py runs/demo --pretrain-steps 2000 --finetune-epochs 3 --finetune-lr 1e-3

Everything runs through the console commands a user types (plm-train, plm-finetune), on the CPU, on files shipped
with the package. The closing table shows the pretraining curve (MLM accuracy beside its unigram baseline, the share
of masked tokens that the most frequent token is; NSP accuracy on held-out articles and on the training pairs, each
beside its majority label) and SST-2 dev accuracy from the pretrained and from the random weights. JSON with the
same figures goes to RUN_DIR/demo_summary.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import torch
from omegaconf import OmegaConf
from tokenizers import Tokenizer
from torch import nn

from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.data.build import prepare_pretraining_data
from plm_toolkit.data.sources.corpus import resource_path
from plm_toolkit.interop.pretrained import load_backbone
from plm_toolkit.training.logging import read_metrics

BIN = Path(sys.executable).parent
SST2 = [
    "task=sst2",
    "data.train_file=" + resource_path("corpora/sst2/train.tsv"),
    "data.validation_file=" + resource_path("corpora/sst2/dev.tsv"),
    "data.max_seq_len=64",
    "hardware=cpu",
    "model.dropout=0.1",
]


def command(name: str, *overrides: str) -> float:
    """Run a plm command; returns its wall-clock seconds (a failure stops the demo with its own message)."""
    started = time.perf_counter()
    done = subprocess.run([str(BIN / name), *overrides])
    if done.returncode != 0:
        sys.exit(done.returncode)
    return time.perf_counter() - started


def random_copy(pretrained: Path, out: Path, seed: int) -> Path:
    """The pretrained checkpoint's architecture and tokenizer with freshly initialized weights, as a checkpoint."""
    loaded = load_backbone(pretrained)
    torch.manual_seed(seed)
    fresh = type(loaded.model)(loaded.model.config)
    config_yaml = (pretrained / ckpt.CONFIG_FILE).read_text()
    tokenizer_json = (pretrained / ckpt.TOKENIZER_FILE).read_text()
    if out.exists():
        shutil.rmtree(out)
    state = {"step": 0, "samples_seen": 0}
    return ckpt.save_checkpoint(out, 0, fresh, nn.Module(), state, config_yaml, tokenizer_json, keep_last=0)


def unigram_baseline(tokenizer_file: Path, text_file: Path) -> float:
    """MLM accuracy of always predicting the most frequent token: its share of the validation text's tokens (masked
    positions are drawn uniformly from the real tokens)."""
    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    counts: Counter = Counter()
    for line in Path(text_file).read_text(encoding="utf-8").splitlines():
        if line.strip():
            counts.update(tokenizer.encode(line, add_special_tokens=False).ids)
    return counts.most_common(1)[0][1] / max(sum(counts.values()), 1)


def nsp_majority(pretrained: Path) -> dict | None:
    """NSP accuracy of always answering the more frequent label, on the training pairs and on the validation pairs
    the run evaluated (more than half of them are random next segments: a chunk of one long sentence always gets
    one, as in BERT's create_pretraining_data.py); None when the objective has no NSP."""
    cfg = OmegaConf.load(pretrained / ckpt.CONFIG_FILE)
    if "nsp" not in str(cfg.objective.name):
        return None
    data = prepare_pretraining_data(cfg.data, "sentence_pairs", int(cfg.trainer.seed))
    shares = {}
    for split, examples in (("train", data.train), ("validation", data.validation)):
        labels = examples["next_sentence_label"]
        share = sum(labels) / max(len(labels), 1)
        shares[split] = max(share, 1 - share)
    return shares


def training_nsp(metrics: list[dict], step: int, every: int) -> float | None:
    """Mean NSP accuracy of the logged training steps in the `every` steps up to `step`."""
    values = [r["nsp_accuracy"] for r in metrics if "nsp_accuracy" in r and step - every < r["step"] <= step]
    return sum(values) / len(values) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", nargs="?", default=f"runs/demo-{time.strftime('%Y%m%d-%H%M%S')}")
    parser.add_argument("--pretrain-steps", type=int, default=None, help="experiment=demo_cpu's 2000 if not given")
    parser.add_argument("--finetune-epochs", type=float, default=3)
    parser.add_argument("--finetune-lr", type=float, default=1e-3)
    args = parser.parse_args()
    run = Path(args.run_dir)
    started = time.perf_counter()

    steps = [f"trainer.max_steps={args.pretrain_steps}"] if args.pretrain_steps else []
    pretrain_seconds = command("plm-train", "experiment=demo_cpu", *steps, f"hydra.run.dir={run / 'pretrain'}")
    pretrained = ckpt.plm_checkpoint_dir(run / "pretrain")
    scratch = random_copy(pretrained, run / "random_init", seed=1234)

    finetune = [*SST2, f"trainer.epochs={args.finetune_epochs}", f"optimizer.lr={args.finetune_lr}"]
    seconds = {}
    for name, checkpoint in (("sst2", pretrained), ("sst2_from_random", scratch)):
        seconds[name] = command("plm-finetune", *finetune, f"model.checkpoint={checkpoint}",
                                f"hydra.run.dir={run / name}")  # fmt: skip

    metrics = read_metrics(run / "pretrain" / "metrics.jsonl")
    evaluations = [r for r in metrics if "eval_mlm_accuracy" in r]
    every = evaluations[0]["step"] if evaluations else 1
    curve = []
    for r in evaluations:
        point = {k: r[k] for k in ("step", "eval_mlm_accuracy", "eval_nsp_accuracy", "eval_mlm_perplexity") if k in r}
        if training_nsp(metrics, r["step"], every) is not None:
            point["train_nsp_accuracy"] = training_nsp(metrics, r["step"], every)
        curve.append(point)
    baseline = unigram_baseline(pretrained / ckpt.TOKENIZER_FILE, Path(resource_path("corpora/wikitext2/valid.txt")))
    majority = nsp_majority(pretrained)
    results = {name: json.loads((run / name / "eval_results.json").read_text()) for name in seconds}
    summary = {
        "run_dir": str(run),
        "pretraining": {
            "seconds": round(pretrain_seconds, 1),
            "curve": curve,
            "mlm_unigram_baseline": baseline,
            "nsp_majority_class": majority,
        },
        "sst2_dev_accuracy": {
            "pretrained": results["sst2"]["accuracy"],
            "random_init": results["sst2_from_random"]["accuracy"],
        },  # fmt: skip
        "finetune_seconds": {k: round(v, 1) for k, v in seconds.items()},
        "total_seconds": round(time.perf_counter() - started, 1),
    }
    (run / "demo_summary.json").write_text(json.dumps(summary, indent=2) + "\n")

    print(f"\n== make demo: {run} ({summary['total_seconds'] / 60:.1f} minutes) ==")
    print(f"pretraining ({pretrain_seconds / 60:.1f} min); MLM and held-out NSP on the bundled valid.txt (4 articles")
    print("the model never saw), training NSP over the steps since the previous evaluation:")
    print("  step   MLM accuracy   MLM perplexity   NSP held-out   NSP training")
    for r in curve:
        held_out = f"{r['eval_nsp_accuracy']:.3f}" if "eval_nsp_accuracy" in r else "-"
        training = f"{r['train_nsp_accuracy']:.3f}" if "train_nsp_accuracy" in r else "-"
        print(f"  {r['step']:>4}   {r['eval_mlm_accuracy']:.3f}          {r['eval_mlm_perplexity']:<15.1f}  "
              f"{held_out:<13}  {training}")  # fmt: skip
    nsp_line = ""
    if majority:
        nsp_line = f"; NSP's majority label: {majority['validation']:.3f} held out, {majority['train']:.3f} in training"
    print(f"  (always the most frequent token: MLM accuracy {baseline:.3f}{nsp_line})")
    gain = results["sst2"]["accuracy"] - results["sst2_from_random"]["accuracy"]
    print(f"SST-2 dev accuracy, {args.finetune_epochs:g} epochs on the bundled 3,000 rows (best epoch kept):")
    print(f"  from the pretrained model  {results['sst2']['accuracy']:.3f}   ({run / 'sst2'})")
    print(f"  from random weights        {results['sst2_from_random']['accuracy']:.3f}   ({run / 'sst2_from_random'})")
    print(f"  gain from pretraining      {gain:+.3f}")
    print(f"figures: {run / 'demo_summary.json'}; curves: tensorboard --logdir {run}")


if __name__ == "__main__":
    main()
