"""T5 for ``scripts/bench_pretrain.py --model t5``: our T5 with its ``span_corruption`` objective against
transformers' ``T5ForConditionalGeneration`` (v1.0 layout), on the same span-corrupted batches.

    python scripts/bench_pretrain.py --model t5 --config small --seq-len 128 --batch-size 8 --steps 4 --warmup 1

Batches are random raw windows of the length that fills ``--seq-len`` encoder tokens once corrupted (141 raw
tokens for 128 inputs and 29 targets), corrupted by our objective's transform and fed to both models: inputs,
shifted targets and labels. Throughput counts encoder inputs plus decoder targets. Timing and memory are
``side_by_side.py``'s.
"""

from __future__ import annotations

from functools import partial

import torch
from side_by_side import Suite, compare, device_of, make_optimizer, memory_probe

from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.models.t5 import T5, T5Config
from plm_toolkit.objectives.base import normalized_loss
from plm_toolkit.objectives.span_corruption import SpanCorruptionConfig, SpanCorruptionObjective
from plm_toolkit.objectives.span_noise import IGNORE_INDEX, SpanCorruption, random_spans_helper

# (layers per stack, d_model, heads of 64, d_ff): a tiny T5, T5-Small and T5-Base (v1.0).
SIZES = {"tiny": (2, 128, 2, 512), "small": (6, 512, 8, 2048), "base": (12, 768, 12, 3072)}
# The released T5 vocabulary: 32000 pieces with <pad> 0, </s> 1, <unk> 2, then 100 sentinels down from
# <extra_id_0> = 32099; the checkpoints' embedding has 32128 rows (--vocab-size).
TOKENS = 32100
VOCAB = Vocab(size=TOKENS, pad_id=0, eos_id=1, unk_id=2, sentinel_ids=tuple(range(TOKENS - 1, TOKENS - 101, -1)))


def t5_config(args) -> T5Config:
    layers, hidden, heads, intermediate = SIZES[args.config]
    return T5Config(
        vocab_size=args.vocab_size,
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        head_size=64,
        intermediate_size=intermediate,
    )


def make_batches(args, transform, count: int, tokens: int = TOKENS) -> list[dict[str, torch.Tensor]]:
    """``count`` span-corrupted batches of random ids below the ``tokens - 100`` that the sentinels start at."""
    generator = torch.Generator().manual_seed(args.seed)
    window, _ = random_spans_helper(args.seq_len, 0.15, 3.0)
    batches = []
    for index in range(count):
        ids = torch.randint(3, tokens - 100, (args.batch_size, window), generator=generator)
        seeds = [args.seed * 1_000_003 + index * args.batch_size + row for row in range(args.batch_size)]
        batches.append(transform({"input_ids": ids, "attention_mask": torch.ones_like(ids)}, seeds))
    return batches


class OursRunner:
    """Our T5 with the registered ``span_corruption`` objective (it has no parameters of its own)."""

    def __init__(self, config: T5Config, device: torch.device):
        self.model = T5(config).to(device).train()
        self.objective = SpanCorruptionObjective(SpanCorruptionConfig(), self.model, VOCAB).to(device).train()
        self.optimizer = make_optimizer(list(self.model.parameters()), device)
        self.num_parameters = self.model.num_parameters()

    def step(self, batch: dict[str, torch.Tensor], autocast) -> None:
        with autocast():
            out = self.objective(self.model, batch)
        # The loop divides loss sums by the global target count; here one batch is the whole window.
        loss = normalized_loss(out, {k: float(v) for k, v in self.objective.target_counts(batch).items()})
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


class TransformersRunner:
    """``transformers.T5ForConditionalGeneration`` on the same config, trained through its ``labels`` argument."""

    def __init__(self, config: T5Config, device: torch.device):
        import transformers

        hf_config = transformers.T5Config(
            vocab_size=config.vocab_size,
            d_model=config.hidden_size,
            d_kv=config.head_size,
            d_ff=config.intermediate_size,
            num_layers=config.num_layers,
            num_heads=config.num_heads,
            dropout_rate=config.dropout,
            feed_forward_proj="relu",
            pad_token_id=VOCAB.pad_id,
            eos_token_id=VOCAB.eos_id,
            decoder_start_token_id=VOCAB.pad_id,
        )
        self.model = transformers.T5ForConditionalGeneration(hf_config).to(device).train()
        self.optimizer = make_optimizer(list(self.model.parameters()), device)
        self.num_parameters = sum(p.numel() for p in self.model.parameters())

    def step(self, batch: dict[str, torch.Tensor], autocast) -> None:
        with autocast():
            out = self.model(**{k: batch[k] for k in ("input_ids", "attention_mask", "decoder_input_ids", "labels")})
        out.loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def suite(args) -> Suite:
    config = t5_config(args)
    transform = SpanCorruption(VOCAB.sentinel_ids, VOCAB.eos_id, VOCAB.pad_id, decoder_start_id=VOCAB.pad_id)
    return Suite(
        name="t5",
        runners={"ours": partial(OursRunner, config), "transformers": partial(TransformersRunner, config)},
        batches=partial(make_batches, args, transform),
        tokens=lambda batch: int(batch["attention_mask"].sum() + (batch["labels"] != IGNORE_INDEX).sum()),
    )


def run(args, argv: list[str]) -> dict:
    if args.memory_probe:
        return memory_probe(args, suite(args))
    return compare(args, argv, suite(args), device_of(args))
