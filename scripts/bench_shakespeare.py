"""nanoGPT's CPU Shakespeare recipe through the product: split tinyshakespeare 90/10 by characters as nanoGPT's
``data/shakespeare_char/prepare.py`` does, run ``plm-train experiment=shakespeare_char_cpu``, then greedy
``plm-generate`` from the last checkpoint. Prints one JSON object: the validation loss at every evaluation (over
the whole validation file), the wall time, and the greedy sample with its count of newlines (the text is kept as
written, so the model learns where lines end).

    python scripts/bench_shakespeare.py                       # the full recipe: 2,000 steps, about 10 minutes here
    python scripts/bench_shakespeare.py --steps 200           # a quick check that it runs

nanoGPT's README gives a validation loss of about 1.88 for this recipe on a CPU; the issue's bar is 1.95.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO.parent / "shared" / "data" / "tinyshakespeare" / "input.txt"
PROMPT = "ROMEO:"


def split(source: Path, folder: Path) -> tuple[Path, Path]:
    """nanoGPT's split: the first 90% of the characters train, the rest validate."""
    text = source.read_text(encoding="utf-8")
    cut = int(len(text) * 0.9)
    train, validation = folder / "train.txt", folder / "val.txt"
    train.write_text(text[:cut], encoding="utf-8")
    validation.write_text(text[cut:], encoding="utf-8")
    return train, validation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=SOURCE, help="tinyshakespeare's input.txt")
    parser.add_argument("--steps", type=int, default=2000, help="optimizer steps (the recipe's schedule follows)")
    # The recipe's block is 64 characters, and plm-generate does not slide a window past the model's positions.
    parser.add_argument("--new-tokens", type=int, default=64 - len(PROMPT), help="characters of the greedy sample")
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args()
    if not args.source.is_file():
        sys.exit(f"error: {args.source} is not a file; give tinyshakespeare's input.txt with --source")
    bin_dir = Path(sys.executable).parent
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        train, validation = split(args.source, work)
        run_dir = work / "run"
        overrides = [
            "experiment=shakespeare_char_cpu", f"data.train_files=[{train}]", f"data.validation_files=[{validation}]",
            f"data.cache_dir={work / 'cache'}", f"trainer.max_steps={args.steps}",
            f"optimizer.total_steps={args.steps}", f"trainer.eval_every={max(args.steps // 8, 1)}",
            f"trainer.seed={args.seed}", "trainer.progress_bar=false", "trainer.tensorboard=false",
            f"hydra.run.dir={run_dir}",
        ]  # fmt: skip
        started = time.perf_counter()
        subprocess.run([str(bin_dir / "plm-train"), *overrides], check=True, cwd=work)
        seconds = time.perf_counter() - started
        records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
        evaluations = [(r["step"], round(r["eval_loss"], 4)) for r in records if "eval_loss" in r]
        subprocess.run(
            [str(bin_dir / "plm-generate"), f"checkpoint={run_dir / 'checkpoints' / 'last'}", f"prompt={PROMPT}",
             f"max_new_tokens={args.new_tokens}", "stop_at_eos=false", f"output_file={work / 'sample.jsonl'}"],
            check=True, cwd=work,
        )  # fmt: skip
        text = json.loads((work / "sample.jsonl").read_text().splitlines()[0])["text"]
    result = {
        "steps": args.steps,
        "seconds": round(seconds, 1),
        "seconds_per_step": round(seconds / args.steps, 4),
        "eval_loss": evaluations,
        "final_eval_loss": evaluations[-1][1] if evaluations else None,
        "nanogpt_published_eval_loss": 1.88,
        "greedy_sample": text,
        "sample_newlines": text.count("\n"),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
