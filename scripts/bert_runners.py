"""Our BERT + MLM training step and ``transformers.BertForMaskedLM``'s, on the same masked batches: the runners of
``bench_pretrain.py`` and ``gemm_share.py``."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

import torch
from omegaconf import OmegaConf

from plm_toolkit.core.registry import OBJECTIVES
from plm_toolkit.core.schema import HardwareConfig, OptimizerConfig, TrainerConfig
from plm_toolkit.data.batching.packing import pack_rows
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.models.bert import Bert, BertConfig
from plm_toolkit.objectives.mlm import MlmConfig
from plm_toolkit.training.distributed import ProcessInfo
from plm_toolkit.training.loop import Trainer
from plm_toolkit.training.precision import Runtime

# (layers, hidden, heads, intermediate): Google's BERT-Tiny and BERT-Base.
SIZES = {"tiny": (2, 128, 2, 512), "base": (12, 768, 12, 3072)}
# bert-base-uncased's special ids.
VOCAB_IDS = dict(pad_id=0, unk_id=100, cls_id=101, sep_id=102, mask_id=103)
# Our variants: each adds one switch to the one before (hardware.* keys; "batch" multiplies the batch size).
SWITCHES = {
    "eager": {"optimizer_implementation": "foreach", "compile": False, "unpad": False},
    "fused": {"optimizer_implementation": "fused", "compile": False, "unpad": False},
    "fused+compile": {"optimizer_implementation": "fused", "compile": True, "unpad": False},
    "fused+compile+unpad": {"optimizer_implementation": "fused", "compile": True, "unpad": True},
    "fused+unpad": {"optimizer_implementation": "fused", "compile": False, "unpad": True},
    "fused+compile+cudagraphs": {
        "optimizer_implementation": "fused",
        "compile": True,
        "unpad": False,
        "compile_mode": "reduce-overhead",
    },
}


def bert_config(args: argparse.Namespace) -> BertConfig:
    layers, hidden, heads, intermediate = SIZES[args.config]
    return BertConfig(
        vocab_size=args.vocab_size,
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        intermediate_size=intermediate,
        max_position_embeddings=max(512, args.seq_len),
    )


def make_batches(args, vocab: Vocab, transform, count: int, batch_size: int) -> list[dict[str, torch.Tensor]]:
    """Masked batches of [CLS] tokens [SEP] rows, min-fill..100% of seq_len long, padded to seq_len."""
    generator = torch.Generator().manual_seed(args.seed)
    first_word = max(vocab.special_ids) + 1
    batches = []
    for index in range(count):
        b, t = batch_size, args.seq_len
        ids = torch.randint(first_word, args.vocab_size, (b, t), generator=generator)
        lengths = torch.randint(max(int(args.min_fill * t), 3), t + 1, (b,), generator=generator)
        attention_mask = (torch.arange(t).expand(b, t) < lengths[:, None]).long()
        ids[:, 0] = vocab.cls_id
        ids[torch.arange(b), lengths - 1] = vocab.sep_id
        ids[attention_mask == 0] = vocab.pad_id
        special = (ids == vocab.cls_id) | (ids == vocab.sep_id) | (attention_mask == 0)
        batch = {"input_ids": ids, "attention_mask": attention_mask, "token_type_ids": torch.zeros_like(ids)}
        batch["special_tokens_mask"] = special
        batches.append(transform(batch, [args.seed * 1_000_003 + index * b + row for row in range(b)]))
    return batches


def pin(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.pin_memory() for k, v in batch.items()} if device.type == "cuda" else batch


class OursRunner:
    """plm-train's training step on our Bert + the registered mlm objective, with the given hardware switches."""

    def __init__(self, name, config, vocab, device, precision, switches: dict, batch_size: int, run_dir: Path):
        self.name, self.batch_size, self.unpad = name, batch_size, bool(switches.get("unpad"))
        model = Bert(config)
        objective = OBJECTIVES.get("mlm").builder(MlmConfig(), model, vocab)
        hardware = OmegaConf.structured(HardwareConfig(**switches, precision=precision))
        trainer_cfg = OmegaConf.structured(TrainerConfig(batch_size=batch_size, progress_bar=False, tensorboard=False))
        optimizer_cfg = OmegaConf.structured(OptimizerConfig(lr=1e-4, schedule="constant", d_model=config.hidden_size))
        runtime = Runtime(device, precision, ProcessInfo(), ddp=False, backend="gloo")
        self.trainer = Trainer(
            model=model,
            objective=objective,
            train_examples=[],
            eval_examples=None,
            collate=None,
            runtime=runtime,
            trainer_cfg=trainer_cfg,
            optimizer_cfg=optimizer_cfg,
            hardware_cfg=hardware,
            run_dir=run_dir,
            config_yaml="",
            tokenizer_json=None,
        )
        self.num_parameters = sum(p.numel() for p in self.trainer.module.parameters())
        self.steps = 0
        self.flops = self.trainer.flops

    def prepare(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """What the data loader would hand over (packed by a loader worker under hardware.unpad)."""
        if not self.unpad:
            return batch
        return pack_rows(batch, self.trainer.batching.shapes, self.trainer.objective.masking.target_budget)

    def step(self, batch: dict[str, torch.Tensor]) -> None:
        """One optimizer step (training/step.py), numbered on from the last (reseeding, compilation counts)."""
        self.steps += 1
        self.trainer.stepper.update(self.trainer.stepper.gradients([batch], self.steps))


class TransformersRunner:
    """``transformers.BertForMaskedLM`` (sdpa attention) on the same config, trained through its ``labels``;
    ``compile``: its forward pass through ``torch.compile`` (the reference at its best beside our compiled
    variants; ``mode`` as ``hardware.compile_mode``)."""

    def __init__(self, name, config, vocab, device, precision, batch_size: int, compile=False, mode="default"):
        import transformers

        self.name, self.batch_size, self.device = name, batch_size, device
        hf_config = transformers.BertConfig(
            vocab_size=config.vocab_size,
            hidden_size=config.hidden_size,
            num_hidden_layers=config.num_layers,
            num_attention_heads=config.num_heads,
            intermediate_size=config.intermediate_size,
            max_position_embeddings=config.max_position_embeddings,
            pad_token_id=vocab.pad_id,
        )
        hf_config._attn_implementation = "sdpa"
        self.model = transformers.BertForMaskedLM(hf_config).to(device).train()
        self.forward = torch.compile(self.model, mode=mode) if compile else self.model
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4, weight_decay=0.01, fused=True)
        self.autocast = (
            (lambda: torch.autocast(device.type, dtype=torch.bfloat16))
            if precision == "bf16"
            else contextlib.nullcontext
        )
        self.num_parameters = sum(p.numel() for p in self.model.parameters())

    def prepare(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return batch

    def step(self, batch: dict[str, torch.Tensor]) -> None:
        batch = {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}
        with self.autocast():
            out = self.forward(
                input_ids=batch["input_ids"],
                attention_mask=batch["attention_mask"],
                token_type_ids=batch["token_type_ids"],
                labels=batch["mlm_labels"],
            )
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
