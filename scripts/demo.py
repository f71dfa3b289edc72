"""make demo: pretrain the tiny BERT on the bundled corpus (experiment=demo_cpu), fine-tune it as a part-of-speech
tagger on the bundled UD English-EWT slice, fine-tune the same architecture from random weights the same way, and
print what pretraining bought.

    python scripts/demo.py runs/demo --pretrain-steps 2000 --finetune-sentences 1000 --finetune-epochs 5

Everything runs through the console commands a user types (plm-train, plm-finetune), on the CPU, on files shipped
with the package. The closing table shows the pretraining curve (MLM accuracy on held-out text beside what a model
gets without reading any context; NSP accuracy on held-out articles and on the training pairs, each beside the
majority label of the very pairs) and the tagging accuracy from the pretrained and from the random weights, on all
dev words and on the words that the training sentences lack. JSON with the same figures goes to
RUN_DIR/demo_summary.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
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
from plm_toolkit.core.resources import resource_path
from plm_toolkit.data.build import prepare_pretraining_data
from plm_toolkit.interop.pretrained import load_backbone
from plm_toolkit.training.logging import read_metrics
from plm_toolkit.training.phases import phase_bounds

BIN = Path(sys.executable).parent
# BERT's own initialization, that of random weights in the comparison.
BERT_INITIALIZER_RANGE = 0.02
# The same arithmetic on every x86 machine with AVX2 (docs/demo.md#the-same-numbers-on-any-machine): how float sums
# are rounded depends on the number of threads and on the instruction set of PyTorch's kernels and of MKL's matrix
# products, and the demo's pretraining turns a difference in the last bit at step 10 into another curve (held-out
# MLM accuracy 0.194 or 0.205 at step 1,200 with 2 threads on AVX-512 or 1 thread on AVX2, same vocabulary).
THREADS = 2
PINNED = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"}
TAGGING = ["task=pos", "hardware=cpu", "model.dropout=0.1", "data.max_seq_len=128", f"hardware.num_threads={THREADS}"]


def pinned_environment() -> dict[str, str] | None:
    """The environment of the demo's commands: PINNED where the CPU's kernels are AVX2 or AVX-512, else None (and a
    line saying that the figures may then differ from README's)."""
    capability = torch.backends.cpu.get_cpu_capability()
    if capability not in ("AVX2", "AVX512"):
        print(f"note: this CPU runs PyTorch's {capability} kernels, not AVX2: the figures will differ from README's")
        return None
    return {**os.environ, **PINNED}


def command(name: str, *overrides: str) -> float:
    """Run a plm command; returns its wall-clock seconds (a failure stops the demo with its own message)."""
    started = time.perf_counter()
    done = subprocess.run([str(BIN / name), *overrides], env=pinned_environment())
    if done.returncode != 0:
        sys.exit(done.returncode)
    return time.perf_counter() - started


def random_copy(pretrained: Path, out: Path, seed: int, initializer_range: float = BERT_INITIALIZER_RANGE) -> Path:
    """The pretrained checkpoint's architecture and tokenizer with freshly initialized weights, as a checkpoint.

    The weights are drawn as BERT draws them (std 0.02), not with the demo pretraining's 0.05: at 0.05 the tagger
    from random weights scores lower (0.743 against 0.752, docs/demo.md), and the baseline is the better one."""
    loaded = load_backbone(pretrained)
    torch.manual_seed(seed)
    fresh = type(loaded.model)(dataclasses.replace(loaded.model.config, initializer_range=initializer_range))
    config_yaml = (pretrained / ckpt.CONFIG_FILE).read_text()
    tokenizer_json = (pretrained / ckpt.TOKENIZER_FILE).read_text()
    if out.exists():
        shutil.rmtree(out)
    state = {"step": 0, "samples_seen": 0}
    return ckpt.save_checkpoint(out, 0, fresh, nn.Module(), state, config_yaml, tokenizer_json, keep_last=0)


def no_context_baseline(tokenizer_file: Path, text_file: Path, objective) -> dict:
    """MLM accuracy without reading any other token: a target left unchanged (BERT: 10% of them) is copied, any other
    target gets the most frequent token. Returns that accuracy and the most frequent token's share of the text
    (the accuracy of always answering it)."""
    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    counts: Counter = Counter()
    for line in Path(text_file).read_text(encoding="utf-8").splitlines():
        if line.strip():
            counts.update(tokenizer.encode(line, add_special_tokens=False).ids)
    share = counts.most_common(1)[0][1] / max(sum(counts.values()), 1)
    unchanged = 1.0 - float(objective.mask_token_prob) - float(objective.random_token_prob)
    return {"accuracy": unchanged + (1.0 - unchanged) * share, "most_frequent_token": share, "unchanged": unchanged}


def nsp_majority(pretrained: Path) -> dict | None:
    """NSP accuracy of always answering the more frequent label, on the training and validation pairs of each
    sequence length the run trained at (trainer.phases); None when the objective has no NSP. More than half of the
    pairs are random next segments, the more so the shorter the sequences: a chunk of one long sentence always
    gets one, as in BERT's create_pretraining_data.py."""
    cfg = OmegaConf.load(pretrained / ckpt.CONFIG_FILE)
    if "nsp" not in str(cfg.objective.name):
        return None
    lengths = [int(p.max_seq_len) for p in cfg.trainer.phases] or [int(cfg.data.max_seq_len)]
    shares: dict = {}
    for length in dict.fromkeys(lengths):
        data_cfg = cfg.data.copy()
        data_cfg.max_seq_len = length
        data = prepare_pretraining_data(data_cfg, "sentence_pairs", int(cfg.trainer.seed))
        for split, examples in (("train", data.train), ("validation", data.validation)):
            labels = examples["next_sentence_label"]
            share = sum(labels) / max(len(labels), 1)
            shares.setdefault(split, {})[length] = max(share, 1 - share)
    return shares


def phase_lengths(pretrained: Path) -> list[tuple[int, int]]:
    """(last step, tokens per sequence) of each phase of the run, one entry without trainer.phases."""
    cfg = OmegaConf.load(pretrained / ckpt.CONFIG_FILE)
    steps = int(cfg.trainer.max_steps)
    if not cfg.trainer.phases:
        return [(steps, int(cfg.data.max_seq_len))]
    bounds = phase_bounds([float(p.fraction) for p in cfg.trainer.phases], steps)
    return [(end, int(p.max_seq_len)) for (_, end), p in zip(bounds, cfg.trainer.phases, strict=True)]


def length_at(phases: list[tuple[int, int]], step: int) -> int:
    return next(length for end, length in phases if step <= end)


def training_nsp(metrics: list[dict], step: int, every: int) -> float | None:
    """Mean NSP accuracy of the logged training steps in the `every` steps up to `step`."""
    values = [r["nsp_accuracy"] for r in metrics if "nsp_accuracy" in r and step - every < r["step"] <= step]
    return sum(values) / len(values) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", nargs="?", default=f"runs/demo-{time.strftime('%Y%m%d-%H%M%S')}")
    parser.add_argument("--pretrain-steps", type=int, default=None, help="experiment=demo_cpu's 2000 if not given")
    parser.add_argument("--finetune-sentences", type=int, default=1000, help="training sentences of the tagger")
    parser.add_argument("--finetune-epochs", type=float, default=5)
    parser.add_argument("--finetune-lr", type=float, default=1e-3)
    args = parser.parse_args()
    run = Path(args.run_dir)
    started = time.perf_counter()

    steps = [f"trainer.max_steps={args.pretrain_steps}"] if args.pretrain_steps else []
    pretrain_seconds = command("plm-train", "experiment=demo_cpu", *steps, f"hardware.num_threads={THREADS}",
                               f"hydra.run.dir={run / 'pretrain'}")  # fmt: skip
    pretrained = ckpt.plm_checkpoint_dir(run / "pretrain")
    scratch = random_copy(pretrained, run / "random_init", seed=1234)

    finetune = [
        *TAGGING,
        f"data.max_train_samples={args.finetune_sentences}",
        f"trainer.epochs={args.finetune_epochs}",
        f"optimizer.lr={args.finetune_lr}",
    ]
    seconds = {}
    for name, checkpoint in (("pos", pretrained), ("pos_from_random", scratch)):
        seconds[name] = command("plm-finetune", *finetune, f"model.checkpoint={checkpoint}",
                                f"hydra.run.dir={run / name}")  # fmt: skip

    metrics = read_metrics(run / "pretrain" / "metrics.jsonl")
    evaluations = [r for r in metrics if "eval_mlm_accuracy" in r]
    every = evaluations[0]["step"] if evaluations else 1
    phases = phase_lengths(pretrained)
    curve = []
    for r in evaluations:
        point = {k: r[k] for k in ("step", "eval_mlm_accuracy", "eval_nsp_accuracy", "eval_mlm_perplexity") if k in r}
        point["max_seq_len"] = length_at(phases, r["step"])
        if training_nsp(metrics, r["step"], every) is not None:
            point["train_nsp_accuracy"] = training_nsp(metrics, r["step"], every)
        curve.append(point)
    objective = OmegaConf.load(pretrained / ckpt.CONFIG_FILE).objective
    valid = Path(resource_path("corpora/wikitext2/valid.txt"))
    baseline = no_context_baseline(pretrained / ckpt.TOKENIZER_FILE, valid, objective)
    majority = nsp_majority(pretrained)
    results = {name: json.loads((run / name / "eval_results.json").read_text()) for name in seconds}
    summary = {
        "run_dir": str(run),
        "pretraining": {
            "seconds": round(pretrain_seconds, 1),
            "curve": curve,
            "mlm_no_context_baseline": baseline,
            "nsp_majority_label": majority,
        },
        "pos_dev_accuracy": {
            "pretrained": results["pos"]["accuracy"],
            "random_init": results["pos_from_random"]["accuracy"],
        },
        "pos_dev_oov_accuracy": {
            "pretrained": results["pos"].get("oov_accuracy"),
            "random_init": results["pos_from_random"].get("oov_accuracy"),
        },
        "finetune_seconds": {k: round(v, 1) for k, v in seconds.items()},
        "total_seconds": round(time.perf_counter() - started, 1),
    }
    (run / "demo_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    report(run, summary, args)


def report(run: Path, summary: dict, args) -> None:
    pretraining = summary["pretraining"]
    majority, baseline = pretraining["nsp_majority_label"], pretraining["mlm_no_context_baseline"]
    print(f"\n== make demo: {run} ({summary['total_seconds'] / 60:.1f} minutes) ==")
    print(f"pretraining ({pretraining['seconds'] / 60:.1f} min); MLM and held-out NSP on the bundled valid.txt (4 "
          "articles the model never saw), training NSP over the steps since the previous evaluation:")  # fmt: skip
    print("  step  tokens  MLM accuracy  perplexity  NSP held-out (majority)  NSP training (majority)")
    for r in pretraining["curve"]:
        length = r["max_seq_len"]
        held_out = training = "-"
        if "eval_nsp_accuracy" in r and majority:
            held_out = f"{r['eval_nsp_accuracy']:.3f} ({majority['validation'][length]:.3f})"
        if "train_nsp_accuracy" in r and majority:
            training = f"{r['train_nsp_accuracy']:.3f} ({majority['train'][length]:.3f})"
        print(f"  {r['step']:>4}  {length:>6}  {r['eval_mlm_accuracy']:<12.3f}  {r['eval_mlm_perplexity']:<10.1f}  "
              f"{held_out:<23}  {training}")  # fmt: skip
    print(f"  MLM without reading any context (copy the {baseline['unchanged']:.0%} of targets left unchanged, else "
          f"the most frequent token): {baseline['accuracy']:.3f}")  # fmt: skip
    accuracy, unseen = summary["pos_dev_accuracy"], summary["pos_dev_oov_accuracy"]
    print(f"part-of-speech tagging (UD English-EWT, {args.finetune_sentences:,} training sentences, "
          f"{args.finetune_epochs:g} epochs, best epoch kept), dev word accuracy:")  # fmt: skip
    print("                              all words   words not in the training sentences")
    for name, key, folder in (("from the pretrained model", "pretrained", "pos"),
                              ("from random weights", "random_init", "pos_from_random")):  # fmt: skip
        oov = f"{unseen[key]:.3f}" if unseen[key] is not None else "-"
        print(f"  {name:<26}  {accuracy[key]:.3f}       {oov:<8}   ({run / folder})")
    gain = accuracy["pretrained"] - accuracy["random_init"]
    oov_gain = (
        f"{unseen['pretrained'] - unseen['random_init']:+.3f}"
        if None not in (unseen["pretrained"], unseen["random_init"])
        else "-"
    )
    print(f"  gain from pretraining       {gain:+.3f}      {oov_gain}")
    print(f"figures: {run / 'demo_summary.json'}; curves: tensorboard --logdir {run}")


if __name__ == "__main__":
    main()
