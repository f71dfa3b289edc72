"""A weighted blend (data.sources) through the product: three corpora cut from /work/shared/data (WikiText-2, tiny
Shakespeare, the English side of the en-de translation text), weights 0.6/0.3/0.1, a tiny GPT-2 trained by
``plm-train`` for 2,000 steps. Prints one JSON object: the weights, the shares the run logged (``blend_share/<name>``
in metrics.jsonl), the shares counted again from the example indices the loader's order gives for every position
the run read, the epochs of every source, what a concatenation of the same files (``data.train_files``) would have
given (shares in proportion to size), and every source's validation loss at the first and the last evaluation
beside the overall one.

    python scripts/bench_blend.py                 # 2,000 steps, a few minutes on a CPU
    python scripts/bench_blend.py --steps 200     # a quick check that it runs
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
if not SHARED.is_dir():
    SHARED = Path("/work/shared/data")
WEIGHTS = {"wiki": 0.6, "shakespeare": 0.3, "translation": 0.1}
FILES = {
    "wiki": "wikitext2/wiki.test.raw",
    "shakespeare": "tinyshakespeare/input.txt",
    "translation": "translation/en-de/train.en",
}
# Characters of each corpus to train on: the largest source is read in part (under 2 epochs at its 60%), the
# smallest is repeated many times over (10% of the examples from 3% of the text).
TRAIN_CHARACTERS = {"wiki": 1_200_000, "shakespeare": 400_000, "translation": 50_000}


def cut(folder: Path, scale: float, validation_bytes: int) -> dict[str, tuple[Path, Path]]:
    """Each corpus's first TRAIN_CHARACTERS (times ``scale``) for training and its last ``validation_bytes`` to
    validate."""
    out = {}
    for name, relative in FILES.items():
        text = (SHARED / relative).read_text(encoding="utf-8")
        train, validation = folder / f"{name}.txt", folder / f"{name}_dev.txt"
        train.write_text(
            text[: min(int(TRAIN_CHARACTERS[name] * scale), len(text) - validation_bytes)], encoding="utf-8"
        )
        validation.write_text(text[-validation_bytes:], encoding="utf-8")
        out[name] = (train, validation)
    return out


def counted_shares(overrides: list[str], positions: int) -> list[float]:
    """The sources of the examples the loader's order reads at positions [0, positions), counted one by one."""
    from hydra import compose, initialize_config_module

    from plm_toolkit.config import setup
    from plm_toolkit.config.resolve import resolve_run
    from plm_toolkit.data.build import prepare_pretraining_data

    setup()  # schemas, registries and resolvers, as the entry points do
    with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
        cfg = compose("train", overrides=[o for o in overrides if not o.startswith("hydra.")])
    resolved = resolve_run(cfg)
    blend = prepare_pretraining_data(resolved.data, resolved.plan, int(cfg.trainer.seed)).train
    order = blend.blend_order(int(cfg.trainer.seed))
    sources = np.array([blend.source_of(order(p)) for p in range(positions)])
    return (np.bincount(sources, minlength=len(blend.names)) / positions).tolist()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--scale", type=float, default=1.0, help="times the characters of each corpus trained on")
    args = parser.parse_args()
    bin_dir = Path(sys.executable).parent
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        files = cut(work, args.scale, 20_000)
        items = [
            f"{{name:{name},files:[{files[name][0]}],weight:{weight},validation_files:[{files[name][1]}]}}"
            for name, weight in WEIGHTS.items()
        ]
        overrides = [
            "model=gpt2_tiny", "model.hidden_size=64", "model.intermediate_size=256", "data=text_files",
            f"data.sources=[{','.join(items)}]", "data.max_seq_len=64", "data.tokenizer.vocab_size=2000",
            f"data.cache_dir={work / 'cache'}", f"trainer.batch_size={args.batch_size}",
            f"trainer.max_steps={args.steps}", f"trainer.eval_every={max(args.steps // 4, 1)}",
            "trainer.eval_batches=8", "trainer.log_every=50", "optimizer.lr=2e-3", "trainer.progress_bar=false",
            "trainer.tensorboard=false",
            "hardware=cpu", f"hydra.run.dir={work / 'run'}",
        ]  # fmt: skip
        started = time.perf_counter()
        env = {**os.environ, "TQDM_DISABLE": "1"}
        done = subprocess.run([str(bin_dir / "plm-train"), *overrides], capture_output=True, text=True, env=env)
        seconds = time.perf_counter() - started
        if done.returncode != 0:
            sys.exit(f"plm-train failed:\n{done.stderr[-3000:]}")
        records = [json.loads(line) for line in (work / "run" / "metrics.jsonl").read_text().splitlines()]
        train = [r for r in records if "lr" in r][-1]
        evaluations = [r for r in records if "eval_loss" in r]
        positions = args.steps * args.batch_size
        counted = counted_shares(overrides, positions)
        sizes = {name: files[name][0].stat().st_size for name in WEIGHTS}
        names = list(WEIGHTS)
        result = {
            "steps": args.steps,
            "examples_read": positions,
            "seconds": round(seconds, 1),
            "weights": WEIGHTS,
            "logged_shares": {n: round(train[f"blend_share/{n}"], 5) for n in names},
            "counted_shares": {n: round(s, 5) for n, s in zip(names, counted, strict=True)},
            "largest_share_error": round(max(abs(counted[k] - WEIGHTS[n]) for k, n in enumerate(names)), 5),
            "epochs": {n: round(train[f"blend_epochs/{n}"], 3) for n in names},
            "concatenation_shares": {n: round(sizes[n] / sum(sizes.values()), 4) for n in names},
            "validation_loss": {
                when: {"overall": round(r["eval_loss"], 4), **{n: round(r[f"eval_loss/{n}"], 4) for n in names}}
                for when, r in (("first", evaluations[0]), ("last", evaluations[-1]))
            },
            "train_loss_last": round(train["loss"], 4),
        }
        print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
