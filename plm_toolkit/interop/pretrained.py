"""Load a pretrained model: a ``plm-train`` checkpoint, a local Hugging Face folder, or another format a family
registers (``register_format``: ELMo's bilm-tf folders).

    loaded = load_backbone("runs/demo/checkpoints/step_300")      # plm-train: config.yaml + model.safetensors
    loaded = load_backbone("/models/all-MiniLM-L6-v2")           # Hugging Face: config.json + weights
    lm = load_language_model("runs/gpt2/checkpoints/last")       # + the LM head, for generation

The folder is read by ``interop/checkpoint_reader.py``'s ``read_checkpoint``, whatever its kind; this module
takes from it what a command needs: the backbone and its tokenizer (with a fine-tuned checkpoint's task head), or a
model that generates with its objective's LM head.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer
from torch import nn

from plm_toolkit.core import registry
from plm_toolkit.core.errors import CheckpointError, ConfigError
from plm_toolkit.data.tokenization.tokenizer import vocab_from_tokenizer
from plm_toolkit.interop.checkpoint_reader import (
    Checkpoint,
    read_checkpoint,
)
from plm_toolkit.interop.finetuned_head import read_finetuned_head
from plm_toolkit.interop.hf_heads import TaskHead
from plm_toolkit.models.base import ENCODER_DECODER, GENERATIVE

log = logging.getLogger("plm_toolkit")


@dataclass
class LoadedBackbone:
    model: nn.Module
    tokenizer: Tokenizer
    # The folder the weights came from, and its kind ("plm_train", "hf:<model_type>" or a format's name).
    source: Path
    kind: str
    # A fine-tuned checkpoint's task head (a Hugging Face folder's or a plm-finetune run's), when the caller asked
    # for it (``with_task_head``).
    task_head: TaskHead | None = None
    # Backbone keys the checkpoint lacks, which hold a fresh init (the pooler of a token classifier's folder).
    initialized_keys: list[str] = dataclasses.field(default_factory=list)


def with_dropout(model: nn.Module, dropout: float) -> nn.Module:
    """Set every dropout module of the backbone to ``dropout`` (fine-tuning often changes it)."""
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = dropout
    config = getattr(model, "config", None)
    if dataclasses.is_dataclass(config):
        keys = ("hidden_dropout", "attention_dropout", "embedding_dropout", "dropout")
        changes = {k: dropout for k in keys if hasattr(config, k)}
        model.config = dataclasses.replace(config, **changes)
    return model


def load_backbone(path: str | Path, dropout: float | None = None, with_task_head: bool = False) -> LoadedBackbone:
    """A backbone with its weights and tokenizer from a plm-train checkpoint, a Hugging Face folder or a registered
    format. The task head of a fine-tuned checkpoint, a Hugging Face folder's or a plm-finetune run's
    (``interop/finetuned_head.py``), comes along ``with_task_head`` (the task decides on it:
    ``tasks/checkpoint_head.py``); otherwise a Hugging Face folder's gets one warning line that it goes unused, and a
    plm-finetune run's objective.safetensors is not read."""
    found = read_checkpoint(path)
    model, tokenizer, imported = found.model, found.tokenizer, found.imported
    if dropout is not None:
        with_dropout(model, dropout)
    # A tokenizer.json may carry the truncation and padding its creator used; tasks build their own windows.
    tokenizer.no_truncation()
    tokenizer.no_padding()
    loaded = LoadedBackbone(model, tokenizer, found.source, found.kind)
    if found.saved is not None and with_task_head:
        loaded.task_head = read_finetuned_head(found.source, found.saved, model)
    if imported is not None:
        loaded.initialized_keys = list(imported.initialized_keys)
        loaded.task_head = imported.task_head if with_task_head else None
        if imported.task_head is not None and not with_task_head:
            head = imported.task_head
            log.warning(head.unused(f"the {head.architecture} head", "only the backbone is read here"))
    return loaded


@dataclass
class LoadedLanguageModel:
    model: nn.Module
    # (B, H) last hidden states -> (B, V) scores of the next token: the LM head of the checkpoint's objective.
    head: Callable[[torch.Tensor], torch.Tensor]
    tokenizer: Tokenizer
    source: Path
    kind: str


def load_language_model(path: str | Path) -> LoadedLanguageModel:
    """A backbone that can generate, with the LM head of its objective, from a plm-train checkpoint or a Hugging
    Face folder. A bidirectional family is refused in one line (BERT cannot generate)."""
    found = read_checkpoint(path, key="checkpoint")
    model, tokenizer = found.model, found.tokenizer
    if not type(model).capabilities & GENERATIVE:
        able = [n for n in registry.MODELS.names() if registry.MODELS.get(n).builder.capabilities & GENERATIVE]
        raise ConfigError(
            f"model={model.config.name} is bidirectional: it cannot generate text; plm-generate needs a causal or "
            f"encoder-decoder model ({', '.join(able)})"
        )
    tokenizer.no_truncation()
    tokenizer.no_padding()
    head = _lm_head(model, found, vocab_from_tokenizer(tokenizer))
    return LoadedLanguageModel(model.eval(), head, tokenizer, found.source, found.kind)


def _lm_head(model: nn.Module, found: Checkpoint, vocab):
    """The next-token scorer: the checkpoint's objective's (``next_token_logits``), else an encoder-decoder's own
    output layer (``logits``: a translation run, a fine-tuned seq2seq checkpoint), else, for a family whose LM head is
    the tied embedding alone (GPT), that embedding."""
    name, objective_config = found.objective, found.objective_config()
    if objective_config is not None:
        objective = registry.OBJECTIVES.get(name).builder(objective_config, model, vocab)
        if hasattr(objective, "next_token_logits"):
            found.load_objective(objective)
            objective.eval()
            return lambda hidden: objective.next_token_logits(model, hidden)
    if ENCODER_DECODER in type(model).capabilities:
        return model.logits
    if not getattr(type(model), "lm_head_bias", True):
        return lambda hidden: torch.nn.functional.linear(hidden, model.input_embeddings.weight)
    raise CheckpointError(
        f"{found.source}: no language-model head (objective {name or 'none'}); generate from a checkpoint trained with "
        "objective=clm"
    )
