"""GPT-2 for ``scripts/bench_pretrain.py --model gpt2``: our GPT-2 with its ``clm`` objective against transformers'
``GPT2LMHeadModel`` on the same config and batches (training tokens/s and peak memory), and cached greedy
generation against transformers' ``generate`` (new tokens/s, and whether both produced the same tokens).

    python scripts/bench_pretrain.py --model gpt2 --config tiny
    python scripts/bench_pretrain.py --model gpt2 --config small --batch-size 8 --steps 3 --warmup 1

Training batches are full windows of random ids (the stream layout has no padding): T inputs and their T next
tokens, for both models (transformers gets ``shift_labels``, so it, too, reads T positions and predicts T tokens).
Timing and memory are ``side_by_side.py``'s: alternating order, untimed warm-up, CPU peak resident set per model in
a fresh process.
"""

from __future__ import annotations

import statistics
import time
from functools import partial

import torch
import torch.nn.functional as F
from bench_pretrain import synchronize
from side_by_side import Suite, compare, device_of, make_optimizer, memory_probe

from plm_toolkit.generation.decoding import SearchConfig, generate
from plm_toolkit.models.gpt import GPT, GPT2Config
from plm_toolkit.objectives.base import normalized_loss
from plm_toolkit.objectives.clm import CausalLanguageModeling, ClmConfig

# (layers, hidden, heads, intermediate): a 2-layer GPT-2 and GPT-2 small (124M).
SIZES = {"tiny": (2, 128, 2, 512), "small": (12, 768, 12, 3072)}


def gpt2_config(args) -> GPT2Config:
    layers, hidden, heads, intermediate = SIZES[args.config]
    return GPT2Config(
        vocab_size=args.vocab_size,
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        intermediate_size=intermediate,
        max_position_embeddings=max(1024, args.seq_len + args.prompt_len + args.new_tokens),
    )


def make_batches(args, count: int) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(args.seed)
    shape = (args.batch_size, args.seq_len + 1)
    return [
        {
            "input_ids": torch.randint(0, args.vocab_size, shape, generator=generator),
            "attention_mask": torch.ones(shape),
        }
        for _ in range(count)
    ]


class OursRunner:
    """Our GPT-2 with the registered clm objective (its loss never holds all the logits at once)."""

    def __init__(self, config: GPT2Config, device: torch.device):
        self.model = GPT(config).to(device).train()
        self.objective = CausalLanguageModeling(ClmConfig(), self.model, None).to(device).train()
        params = [*self.model.parameters(), *self.objective.parameters()]
        self.optimizer = make_optimizer(params, device)
        self.num_parameters = sum(p.numel() for p in params)

    def step(self, batch: dict[str, torch.Tensor], autocast) -> None:
        with autocast():
            out = self.objective(self.model, batch)
        loss = normalized_loss(out, {"clm": float(batch["input_ids"][:, 1:].numel())})
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def transformers_config(config: GPT2Config):
    import transformers

    return transformers.GPT2Config(
        vocab_size=config.vocab_size,
        n_embd=config.hidden_size,
        n_layer=config.num_layers,
        n_head=config.num_heads,
        n_inner=config.intermediate_size,
        n_positions=config.max_position_embeddings,
    )


class TransformersRunner:
    """``transformers.GPT2LMHeadModel`` on the same config, trained through ``labels`` / ``shift_labels``."""

    def __init__(self, config: GPT2Config, device: torch.device):
        import transformers

        self.model = transformers.GPT2LMHeadModel(transformers_config(config)).to(device).train()
        self.optimizer = make_optimizer(list(self.model.parameters()), device)
        self.num_parameters = sum(p.numel() for p in self.model.parameters())

    def step(self, batch: dict[str, torch.Tensor], autocast) -> None:
        ids = batch["input_ids"]
        with autocast():
            targets = ids[:, 1:].contiguous()
            out = self.model(input_ids=ids[:, :-1], labels=targets, shift_labels=targets)
        out.loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def suite(args) -> Suite:
    config = gpt2_config(args)
    return Suite(
        name="gpt2",
        runners={"ours": partial(OursRunner, config), "transformers": partial(TransformersRunner, config)},
        batches=partial(make_batches, args),
        tokens=lambda batch: batch["input_ids"][:, 1:].numel(),
    )


def generation(args, device: torch.device) -> dict:
    """Greedy continuation of ``--generate-batch`` prompts of ``--prompt-len`` tokens by ``--new-tokens``, with the
    key/value cache on both sides; the same weights (ours exported into theirs by name)."""
    import transformers

    torch.manual_seed(args.seed)
    config = gpt2_config(args)
    model = GPT(config).to(device).eval()
    reference = transformers.GPT2LMHeadModel(transformers_config(config)).to(device).eval()
    missing, unexpected = reference.load_state_dict(hf_state(model), strict=False)
    assert missing == ["lm_head.weight"] and not unexpected, (missing, unexpected)  # the head is tied
    prompts = torch.randint(0, args.vocab_size, (args.generate_batch, args.prompt_len), device=device)
    mask = torch.ones_like(prompts)
    head = lambda hidden: F.linear(hidden, model.input_embeddings.weight)
    search = SearchConfig(max_new_tokens=args.new_tokens)
    timings: dict[str, list[float]] = {"ours": [], "transformers": []}
    outputs = {}
    for repeat in range(3):  # the first round warms up both
        for name in ("ours", "transformers") if repeat % 2 == 0 else ("transformers", "ours"):
            synchronize(device)
            start = time.perf_counter()
            with torch.no_grad():
                if name == "ours":
                    outputs[name] = generate(model.decoder(head), prompts, mask, search)
                else:
                    out = reference.generate(
                        input_ids=prompts,
                        attention_mask=mask,
                        max_new_tokens=args.new_tokens,
                        min_new_tokens=args.new_tokens,
                        do_sample=False,
                        pad_token_id=0,
                    )
                    outputs[name] = out[:, prompts.shape[1] :].tolist()
            synchronize(device)
            if repeat:
                timings[name].append(time.perf_counter() - start)
    new_tokens = args.generate_batch * args.new_tokens
    result = {name: {"new_tokens_per_s": round(new_tokens / statistics.median(t), 1)} for name, t in timings.items()}
    result["same_tokens"] = outputs["ours"] == outputs["transformers"]
    result["speedup"] = round(result["ours"]["new_tokens_per_s"] / result["transformers"]["new_tokens_per_s"], 2)
    result.update(batch=args.generate_batch, prompt_len=args.prompt_len, new_tokens=args.new_tokens)
    return result


def hf_state(model: GPT) -> dict[str, torch.Tensor]:
    """Our weights under GPT2LMHeadModel's names, through the checkpoint adapter."""
    from plm_toolkit.core.catalog import load_all
    from plm_toolkit.interop.hf import ADAPTERS

    load_all()
    part = ADAPTERS.for_config(model.config).export(model, {}, None)[0]
    return part.tensors


def run(args, argv: list[str]) -> dict:
    if args.memory_probe:
        return memory_probe(args, suite(args))
    device = device_of(args)
    result = compare(args, argv, suite(args), device)
    if not args.no_generate:
        result["generation"] = generation(args, device)
    return result
