"""The host's share of a training step: preparing one micro-batch as plm-train does (rows read from the store,
collated, masked, packed with hardware.unpad), beside transformers' ``DataCollatorForLanguageModeling`` (what
run_mlm.py uses) on the same rows. On a GPU this work runs while the device computes, unless a step or a log line
waits for the device, so it bounds the step from below.

    python scripts/bench_batches.py                                   # BERT-Base's 256 x 128 on the bundled corpus
    python scripts/bench_batches.py --rows 16 --override model=bert_tiny

The run is plm-train's own assembly (``commands.train.run``: config, data, model, objective, Trainer) with the
training loop replaced by the timing: ``--batches`` micro-batches after ``--warmup`` untimed ones, one thread, for
the padded and the packed layout. Prints one JSON object: ms per batch of each, and the reference's.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch


def time_batches(overrides: list[str], warmup: int, count: int) -> dict:
    """ms per micro-batch of plm-train's own loader for ``overrides``, and the rows it read (for the reference)."""
    from hydra import compose, initialize_config_module

    from plm_toolkit.commands.train import run
    from plm_toolkit.config import setup
    from plm_toolkit.training import loop

    setup()
    with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    measured: dict = {}

    def timed_fit(trainer) -> dict:
        batches = trainer._batches().start()
        for _ in range(warmup):
            next(batches)
        start = time.perf_counter()
        for _ in range(count):
            batch = next(batches)
        measured["ms_per_batch"] = round((time.perf_counter() - start) / count * 1000, 2)
        measured["shape"] = list(batch["input_ids"].shape)
        examples = trainer.train_examples
        measured["rows"] = [examples[i % len(examples)]["input_ids"] for i in range(count * trainer.layout.batch_size)]
        measured["tokenizer"] = trainer.checkpointer.tokenizer_json
        return {}

    original, loop.Trainer.fit = loop.Trainer.fit, timed_fit
    try:
        with tempfile.TemporaryDirectory() as folder:
            run(cfg, Path(folder))
    finally:
        loop.Trainer.fit = original
    return measured


def reference(rows: list, tokenizer_json: str, batch_rows: int, warmup: int, count: int) -> float:
    """ms per batch of ``DataCollatorForLanguageModeling`` over the same rows (the tokenizer's [PAD] and [MASK])."""
    from tokenizers import Tokenizer
    from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(tokenizer_json), pad_token="[PAD]", mask_token="[MASK]"
    )
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15, return_tensors="pt")
    batches = [[{"input_ids": r} for r in rows[i : i + batch_rows]] for i in range(0, len(rows), batch_rows)]
    for batch in batches[:warmup]:
        collator(batch)
    start = time.perf_counter()
    for batch in batches[:count]:
        collator(batch)
    return round((time.perf_counter() - start) / count * 1000, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=256, help="rows per micro-batch (trainer.batch_size)")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--override", action="append", default=[], help="one more plm-train override (repeatable)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    base = ["model=bert_base", "objective=mlm", "hardware=cpu", f"trainer.batch_size={args.rows}"]
    base += [f"data.max_seq_len={args.seq_len}", "trainer.progress_bar=false", *args.override]
    result = {"command": " ".join(sys.argv), "torch_threads": 1, "rows": args.rows, "seq_len": args.seq_len}
    for name, switches in (("padded", ["hardware.unpad=false"]), ("packed", ["hardware.unpad=true"])):
        measured = time_batches([*base, *switches], args.warmup, args.batches)
        result[name] = {"ms_per_batch": measured["ms_per_batch"], "shape": measured["shape"]}
    result["transformers_collator_ms_per_batch"] = reference(
        measured["rows"], measured["tokenizer"], args.rows, args.warmup, args.batches
    )
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
