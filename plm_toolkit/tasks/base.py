"""The task contract: a fine-tuning task is an objective with its own data.

A task reads the official files of its benchmark into features (``prepare_data``), puts a head on the backbone's
representations and returns loss sums with target counts exactly like a pretraining objective, so the same loop
trains it (accumulation, precision, checkpoints, resume). At evaluation it also returns per-row outputs (logits,
row indices); ``finish_evaluation`` decodes them into predictions and the benchmark's metrics, and keeps files to
write (``artifacts``, e.g. SQuAD's predictions.json).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from tokenizers import Tokenizer
from torch import nn

from plm_toolkit.core.command_schema import FinetuneMode, FinetuneModeConfig
from plm_toolkit.data.batching.shapes import Shapes
from plm_toolkit.data.sources.user_files import not_a_file
from plm_toolkit.data.tokenization.template import Template, template_of  # noqa: F401  (the tasks' import path)
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.models.base import CHARACTERS, Representations
from plm_toolkit.objectives.base import Objective
from plm_toolkit.tasks.features import FeatureEncoder, frozen_layers

log = logging.getLogger("plm_toolkit")

# Label value of positions and rows that carry no target (cross-entropy's ignore_index).
IGNORE = -100


@dataclass
class TaskData:
    # Features: dicts of input_ids, token_type_ids and the task's targets (lists and scalars).
    train: list[dict[str, Any]]
    # Evaluation features (with an ``index`` row number), or None without a validation file.
    validation: list[dict[str, Any]] | None
    # Whatever decoding needs beyond the tensors (gold labels, SQuAD windows and offsets).
    eval_info: Any = None
    # Label names read from the training data, when the task learns its label set from it.
    labels: list[str] = field(default_factory=list)


class PadCollator:
    """Pad list-valued fields to the longest row, rounded up as ``shapes`` says (data/batching/shapes.py):
    ``input_ids`` with the pad id, labels with IGNORE, the rest with 0; a list of lists such as ``char_ids`` to
    (B, T, C) with 0. Stack scalars, and add ``attention_mask``. Picklable for data-loader workers."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, rows: Sequence[dict[str, Any]], shapes: Shapes | None = None) -> dict[str, torch.Tensor]:
        width = (shapes or Shapes()).width(max(len(r["input_ids"]) for r in rows))
        batch: dict[str, torch.Tensor] = {}
        for key, first in rows[0].items():
            if isinstance(first, list) and first and isinstance(first[0], list):
                out = torch.zeros((len(rows), width, len(first[0])), dtype=torch.long)
                for i, r in enumerate(rows):
                    if r[key]:
                        out[i, : len(r[key])] = torch.as_tensor(r[key], dtype=torch.long)
                batch[key] = out  # (B, T, C)
            elif isinstance(first, list):
                fill = self.pad_id if key == "input_ids" else IGNORE if key == "labels" else 0
                out = torch.full((len(rows), width), fill, dtype=torch.long)
                for i, r in enumerate(rows):
                    out[i, : len(r[key])] = torch.as_tensor(r[key], dtype=torch.long)
                batch[key] = out  # (B, T)
            else:
                dtype = torch.float32 if isinstance(first, float) else torch.long
                batch[key] = torch.tensor([r[key] for r in rows], dtype=dtype)  # (B,)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            mask[i, : len(r["input_ids"])] = 1
        batch["attention_mask"] = mask
        return batch


def encode(model: nn.Module, batch: dict[str, torch.Tensor], **options) -> Representations:
    """The backbone over a task batch: token ids, or character ids for a backbone that reads characters (ELMo)."""
    inputs = {"attention_mask": batch["attention_mask"]}
    if "char_ids" in batch:
        inputs["char_ids"] = batch["char_ids"]
    else:
        inputs["input_ids"] = batch["input_ids"]
    if "token_type_ids" in batch:
        inputs["token_type_ids"] = batch["token_type_ids"]
    return model(**inputs, **options)


def character_width(model: nn.Module) -> int:
    """Characters per token when the backbone reads characters (its features need ``char_ids``), else 0."""
    return int(model.config.max_characters) if CHARACTERS in getattr(model, "capabilities", ()) else 0


def summary_vector(model: nn.Module, reps: Representations, attention_mask: torch.Tensor) -> torch.Tensor:
    """The sequence summary a sentence-level head reads: the pooled vector where the family has one (BERT's
    tanh pooler over [CLS]), else the hidden state of the summary token the backbone declares (first or last)."""
    if reps.pooled is not None:
        return reps.pooled  # (B, H)
    if getattr(model, "summary_position", "first") == "last":
        last = attention_mask.sum(dim=1) - 1  # (B,) index of the last real token (right padding)
        return reps.hidden[torch.arange(reps.hidden.shape[0], device=last.device), last]  # (B, H)
    return reps.hidden[:, 0]  # (B, H)


def summary_kind(model: nn.Module) -> str:
    """What ``summary_vector`` reads of ``model``: pooled (its pooler), first or last (a token's hidden state)."""
    if getattr(model, "pooler", None) is not None:
        return "pooled"
    return getattr(model, "summary_position", "first")


def hidden_size(model: nn.Module) -> int:
    """Width of the representations a head reads (ELMo: forward and backward concatenated)."""
    return int(getattr(model, "representation_size", model.config.hidden_size))


def head_dropout(model: nn.Module, configured: float | None) -> float:
    """The task's dropout before its head: as configured, else the backbone's hidden dropout (BERT: 0.1)."""
    if configured is not None:
        return configured
    return float(getattr(model.config, "hidden_dropout", 0.1))


def init_linear(layer: nn.Linear, model: nn.Module) -> nn.Linear:
    nn.init.normal_(layer.weight, mean=0.0, std=float(getattr(model.config, "initializer_range", 0.02)))
    if layer.bias is not None:
        nn.init.zeros_(layer.bias)
    return layer


class Task(Objective):
    """Base class of fine-tuning tasks; subclasses implement ``prepare_data``, ``target_counts``, ``forward``
    and ``finish_evaluation``."""

    metric_denominators = {}
    # The kind of head (``self.head``) a fine-tuned checkpoint's may start (tasks/checkpoint_head.py): sequence,
    # token or span; None for a task without one.
    head_kind: str | None = None
    # The module that is the task's head (its outputs in ``labels`` order, where the task has labels): what a
    # checkpoint's head loads into. The rest of the task module (a task encoder) loads from a plm-finetune checkpoint.
    head_name: str = "head"
    # The metric trainer.metric_for_best_model defaults to; None: the first of task.metrics, else the loss.
    main_metric: str | None = None

    def __init__(
        self, config, model: nn.Module, vocab: Vocab, data: TaskData, finetune: FinetuneModeConfig | None = None
    ):
        super().__init__()
        self.config = config
        self.vocab = vocab
        self.eval_info = data.eval_info
        # finetune.mode=features: a scalar mix + biLSTM over the frozen backbone's layers (tasks/features.py).
        self.features = None
        if finetune is not None and finetune.mode == FinetuneMode.features:
            model.requires_grad_(False)
            self.features = FeatureEncoder(model.representation_layers, hidden_size(model), finetune)
        # Width of what the task's head reads.
        self.width = self.features.output_size if self.features is not None else hidden_size(model)
        # Files the last evaluation produced: name -> JSON-serialisable value.
        self.artifacts: dict[str, Any] = {}
        # Metrics of the last evaluation, unprefixed (what eval_results.json holds).
        self.last_metrics: dict[str, float] = {}

    @classmethod
    def prepare_data(cls, config, data_cfg, tokenizer: Tokenizer, vocab: Vocab, characters: int = 0) -> TaskData:
        """The task's features; with ``characters`` > 0 each also gets ``char_ids`` (T, characters), for a backbone
        that reads words as characters."""
        raise NotImplementedError

    @classmethod
    def file_problems(cls, config, data_cfg) -> list[str]:
        """The data files that are not there, one message each (validation calls it before any work)."""
        keys = ("train_file", "validation_file")
        found = {k: not_a_file(data_cfg[k]) for k in keys if data_cfg[k]}
        return [f"data.{k}: {data_cfg[k]} is not a file ({reason})" for k, reason in found.items() if reason]

    def encode(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> Representations:
        """What the head reads: the backbone's representations, or in features mode the task encoder's over the
        frozen backbone's layers."""
        if self.features is None:
            return encode(model, batch)
        return self.features(frozen_layers(model, batch, encode), batch["attention_mask"])

    def collator(self) -> PadCollator:
        return PadCollator(self.vocab.padding_id)


def limit(items: list, max_items: int | None, what: str) -> list:
    """The first ``max_items`` items (data.max_train_samples / data.max_eval_samples), logged."""
    if max_items is not None and max_items < len(items):
        log.info("using %d of %d %s", max_items, len(items), what)
        return items[:max_items]
    return items
