"""Translation quality for a fixed training time: a small Transformer trained on the en-de pairs on this machine,
then its test BLEU and chrF (sacrebleu, beam 4, alpha 0.6, max length source + 50) against the copy-the-source
baseline (the source sentence as its own translation, which scores well on software messages full of %s, file names
and option names that stay untranslated).

    python scripts/bench_translation.py --minutes 30                 # the measured run (docs/speed-and-benchmarks.md)
    python scripts/bench_translation.py --minutes 3 --test-limit 300 # a quick check that it works

Training runs ``plm-train`` (the same ``run`` the command calls) with ``trainer.time_budget`` set to the minutes given.
The model is ``transformer_tiny`` widened by ``--hidden``/``--layers`` (default: d_model 128, 3 + 3 layers,
4 heads, d_ff 512, about 1.9M parameters with a 4,000-token joint byte-level BPE): at about 6 GFLOP per 1,000
tokens it sees some 5 passes over the 27,583 training pairs in 30 minutes on 2 CPU cores, where the paper's base
model (65M parameters) would not finish one. Batches of 2,048 tokens per side, Adam (0.9, 0.98, 1e-9) with the
Noam schedule (warm-up shortened to ``--warmup`` steps), label smoothing 0.1, dropout 0.1. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

import torch
from hydra import compose, initialize_config_module

from plm_toolkit.commands.train import run
from plm_toolkit.config import setup
from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.data.layouts.token_batches import token_batches
from plm_toolkit.data.sources.parallel_text import ReadCounts, iter_pairs, resolve
from plm_toolkit.generation.decoding import SearchConfig
from plm_toolkit.generation.text_metrics import bleu_chrf
from plm_toolkit.interop.pretrained import load_backbone
from plm_toolkit.objectives.translation import decode

REPO = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(REPO.parent / "shared" / "data" / "translation" / "en-de"))
    parser.add_argument("--run-dir", default="runs/bench_translation")
    parser.add_argument("--minutes", type=float, default=30.0, help="training wall time")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab-size", type=int, default=4000, help="joint byte-level BPE vocabulary")
    parser.add_argument("--max-tokens", type=int, default=2048, help="padded tokens per batch and side")
    parser.add_argument("--warmup", type=int, default=800, help="Noam warm-up steps")
    parser.add_argument("--beams", type=int, default=4)
    parser.add_argument("--test-limit", type=int, default=0, help="score only the first N test pairs (0 = all)")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads (0 = torch's default)")
    parser.add_argument("--hardware", default="cpu", help="the hardware preset to train with (e.g. cuda_bf16)")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--no-train", action="store_true", help="only decode and score the run's last checkpoint")
    return parser.parse_args(argv)


def train_overrides(args: argparse.Namespace) -> list[str]:
    data = Path(args.data)
    return [
        "model=transformer_tiny",
        f"model.hidden_size={args.hidden}",
        f"model.num_layers={args.layers}",
        f"model.num_heads={args.heads}",
        f"model.intermediate_size={4 * args.hidden}",
        "model.max_position_embeddings=256",
        f"data.train_files=[{data / 'train'}]",
        f"data.validation_files=[{data / 'dev.jsonl'}]",
        "data.max_seq_len=128",
        f"data.max_tokens={args.max_tokens}",
        f"data.tokenizer.vocab_size={args.vocab_size}",
        "optimizer=adam_noam",
        f"optimizer.warmup_steps={args.warmup}",
        "objective.decode=false",  # evaluation loss during training; the test set is decoded at the end
        "trainer.eval_every=500",
        "trainer.eval_batches=0",
        "trainer.log_every=50",
        "trainer.save_every=500",
        "trainer.keep_last=5",
        "trainer.progress_bar=false",
        f"trainer.seed={args.seed}",
        f"hardware={args.hardware}",
    ]


def composed(overrides: list[str]):
    setup()  # schemas, presets and resolvers, as the commands register them
    with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
        return compose("train", overrides=overrides)


def train(args: argparse.Namespace, run_dir: Path) -> dict:
    """Train for ``args.minutes`` of wall time; returns the seconds spent and the steps taken."""
    start = time.perf_counter()
    overrides = train_overrides(args)
    cfg = composed([*overrides, f"trainer.time_budget={args.minutes / 60}", "trainer.max_steps=1000000"])
    with contextlib.redirect_stdout(sys.stderr):  # the loop's own lines; stdout is the JSON alone
        run(cfg, run_dir)
    found = ckpt.find_checkpoint("auto", run_dir)
    return {"train_seconds": round(time.perf_counter() - start, 1), "steps": found.step() if found else 0}


@torch.no_grad()
def translate(checkpoint: Path, sources: list[str], beams: int, max_tokens: int, device: str = "cpu") -> list[str]:
    """Beam-search translations of ``sources``, batched by length, in input order (in fp32 on ``device``)."""
    loaded = load_backbone(checkpoint)
    model, tokenizer = loaded.model.eval().to(device), loaded.tokenizer
    eos = tokenizer.token_to_id("</s>")
    ids = [e.ids[:127] + [eos] for e in tokenizer.encode_batch(sources, add_special_tokens=False)]
    # The paper's search: beam 4, alpha 0.6, at most the source length + 50 tokens (section 6.1).
    search = SearchConfig(max_new_tokens=50, max_length_a=1.0, num_beams=beams, length_penalty=0.6, eos_id=eos)
    out: list[str] = [""] * len(sources)
    # Smaller batches than training: every row carries `beams` hypotheses.
    for batch in token_batches([len(i) for i in ids], [1] * len(ids), max(max_tokens // (4 * beams), 128)):
        width = max(len(ids[i]) for i in batch)
        input_ids = torch.full((len(batch), width), model.config.pad_token_id)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, i in enumerate(batch):
            input_ids[row, : len(ids[i])] = torch.tensor(ids[i])
            mask[row, : len(ids[i])] = 1
        decoded = decode(model, {"input_ids": input_ids.to(device), "attention_mask": mask.to(device)}, search)
        for i, tokens in zip(batch, decoded, strict=True):
            out[i] = tokenizer.decode(tokens, skip_special_tokens=True).strip()
    return out


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    run_dir = Path(args.run_dir)
    if args.no_train:
        found = ckpt.find_checkpoint("auto", run_dir)
        trained = {"train_seconds": None, "steps": found.step() if found else 0}
    else:
        trained = train(args, run_dir)
    pairs = list(iter_pairs(resolve(str(Path(args.data) / "test"), "en", "de"), "en", "de", ReadCounts()))
    if args.test_limit:
        pairs = pairs[: args.test_limit]
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    start = time.perf_counter()
    device = "cuda" if args.hardware.startswith("cuda") else "cpu"
    hypotheses = translate(run_dir / "checkpoints" / "last", sources, args.beams, args.max_tokens, device)
    decode_seconds = time.perf_counter() - start
    (run_dir / "test_translations.txt").write_text("".join(h + "\n" for h in hypotheses), encoding="utf-8")
    result = {
        "model": {"hidden_size": args.hidden, "layers": args.layers, "heads": args.heads},
        **trained,
        "test_pairs": len(pairs),
        "beams": args.beams,
        "decode_seconds": round(decode_seconds, 1),
        "test": bleu_chrf(hypotheses, references),
        "copy_source_baseline": bleu_chrf(sources, references),
        "threads": torch.get_num_threads(),
        "hardware": args.hardware,
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
