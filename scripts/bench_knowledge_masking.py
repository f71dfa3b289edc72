"""ERNIE's knowledge masking against plain whole-word masking at equal steps, measured downstream; prints JSON.

For every seed, two tiny ERNIE models are pretrained on the same corpus, tokenizer, units and schedule for
--steps steps, one with objective.masking=knowledge (words, then phrases, then entities, in stages) and one with
objective.masking=whole_word (the same words, no stages); each is then fine-tuned with the same settings on
SST-2 (accuracy on its dev set) or WNUT-17 (entity F1 on emerging.dev), and the metric is reported per run and
as mean and standard deviation per masking.

    .venv/bin/python scripts/bench_knowledge_masking.py --threads 1              # the short version, on a CPU
    .venv/bin/python scripts/bench_knowledge_masking.py --steps 10000 --batch-size 64 --max-seq-len 128 \
        --finetune-steps 2000 --hardware cuda_bf16 --task ner

Defaults: pretraining on WikiText-2's valid + test token files (../shared/data/wikitext2; the training split is not
there), entities from a gazetteer of WNUT-17's training entities plus the phrases collocation scores find
(--no-gazetteer for phrases only), ``model=ernie`` (L=2, H=128), 600 steps of 32 x 64 tokens at lr 5e-4; then
400 fine-tuning steps at lr 1e-3 (sequences of 64), seeds 1, 2 and 3.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The shared data folder: $PLM_SHARED_DATA, else shared/data beside the repository (as scripts/bench_zh.py reads it).
SHARED = Path(os.environ.get("PLM_SHARED_DATA", REPO.parent / "shared" / "data"))
QUIET = ["trainer.progress_bar=false", "trainer.tensorboard=false"]


def compose(config: str, overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module

    from plm_toolkit.config import setup

    setup()  # schemas, presets and resolvers, as the commands register them
    with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
        return hydra_compose(config, overrides=overrides)


def finetune_overrides(task: str) -> list[str]:
    if task == "sst2":
        glue = SHARED / "glue" / "SST-2"
        return ["task=sst2", f"data.train_file={glue / 'train.tsv'}", f"data.validation_file={glue / 'dev.tsv'}"]
    ner = SHARED / "ner"
    return [
        "task=ner",
        f"data.train_file={ner / 'wnut17train.conll'}",
        f"data.validation_file={ner / 'emerging.dev.conll'}",
    ]


def run_all(args, pretrain: list[str], out: Path, result: dict, train, finetune) -> None:
    """Pretrain and fine-tune both arms for every seed, appending one record per run to ``result["runs"]``."""
    for seed in args.seeds:
        for masking in ("knowledge", "whole_word"):
            name = f"{masking}-seed{seed}"
            started = time.perf_counter()
            cfg = compose("train", [*pretrain, f"objective.masking={masking}", f"trainer.seed={seed}"])
            final = train.run(cfg, out / name / "pretrain")
            pretrain_seconds = time.perf_counter() - started
            tuned = compose(
                "finetune",
                [
                    f"model.checkpoint={out / name / 'pretrain' / 'checkpoints' / 'last'}",
                    *finetune_overrides(args.task),
                    "data.max_seq_len=64",
                    f"data.max_train_samples={args.finetune_train_samples or 'null'}",
                    f"trainer.max_steps={args.finetune_steps}",
                    "trainer.epochs=null",  # plm-finetune counts in epochs by default; one length only
                    f"trainer.seed={seed}",
                    f"optimizer.lr={args.finetune_lr}",
                    *QUIET,
                    f"hardware={args.hardware}",
                ],
            )
            finetune.run(tuned, out / name / args.task)
            metrics = json.loads((out / name / args.task / "eval_results.json").read_text())
            result["runs"].append(
                {
                    "masking": masking,
                    "seed": seed,
                    "pretrain_loss": final.get("loss"),
                    "metric": metrics["accuracy" if args.task == "sst2" else "f1"],
                    "pretrain_seconds": round(pretrain_seconds, 1),
                    "seconds": round(time.perf_counter() - started, 1),
                }
            )
            print(json.dumps(result["runs"][-1]), file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    wikitext = SHARED / "wikitext2"
    parser.add_argument("--corpus", nargs="+", default=[wikitext / "wiki.valid.tokens", wikitext / "wiki.test.tokens"])
    parser.add_argument("--steps", type=int, default=600, help="pretraining steps of each model")
    parser.add_argument("--finetune-steps", type=int, default=400)
    parser.add_argument("--finetune-train-samples", type=int, help="fine-tune on the first N rows only (default: all)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--task", choices=["sst2", "ner"], default="sst2")
    parser.add_argument("--model", default="ernie")
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--finetune-lr", type=float, default=1e-3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-seq-len", type=int, default=64)
    parser.add_argument("--no-gazetteer", action="store_true")
    parser.add_argument("--out", default=str(REPO / "runs" / "bench_knowledge_masking"))
    parser.add_argument("--extra", nargs="*", default=[], help="further plm-train overrides for both arms")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--hardware", default="cpu", help="the hardware preset of both steps (cpu, cuda_bf16, ...)")
    args = parser.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)

    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / "scripts"))
    from ernie_units import conll_gazetteer

    import plm_toolkit.commands.finetune as finetune
    import plm_toolkit.commands.train as train

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pretrain = [
        "data=text_files",
        f"data.train_files=[{','.join(str(c) for c in args.corpus)}]",
        f"data.cache_dir={out / 'cache'}",
        f"data.max_seq_len={args.max_seq_len}",
        f"model={args.model}",
        f"trainer.max_steps={args.steps}",
        f"trainer.batch_size={args.batch_size}",
        "trainer.eval_every=0",
        f"trainer.save_every={args.steps}",
        "trainer.log_every=50",
        f"optimizer.lr={args.lr}",
        *QUIET,
        f"hardware={args.hardware}",
        *args.extra,
    ]
    if not args.no_gazetteer:
        gazetteer = out / "gazetteer.txt"
        conll_gazetteer(SHARED / "ner" / "wnut17train.conll", gazetteer)
        pretrain.append(f"objective.entity_gazetteer={gazetteer}")
    result: dict = {"settings": vars(args) | {"corpus": [str(c) for c in args.corpus]}, "runs": []}
    with contextlib.redirect_stdout(sys.stderr):  # the runs' own progress lines; stdout is the JSON alone
        run_all(args, pretrain, out, result, train, finetune)
    for masking in ("knowledge", "whole_word"):
        values = [r["metric"] for r in result["runs"] if r["masking"] == masking]
        spread = statistics.stdev(values) if len(values) > 1 else 0.0
        result[masking] = {"mean": statistics.mean(values), "stdev": spread, "values": values}
    result["metric"] = "SST-2 dev accuracy" if args.task == "sst2" else "WNUT-17 dev entity F1"
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
