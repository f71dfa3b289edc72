"""Load a pretrained model: a ``plm-train`` checkpoint, a local Hugging Face folder, or another format a family
registers (``register_format``: ELMo's bilm-tf folders).

    loaded = load_backbone("runs/demo/checkpoints/step_300")      # plm-train: config.yaml + model.safetensors
    loaded = load_backbone("/models/all-MiniLM-L6-v2")           # Hugging Face: config.json + weights
    lm = load_language_model("runs/gpt2/checkpoints/last")       # + the LM head, for generation

A ``plm-train`` checkpoint is rebuilt through the model registry from the ``model`` section of its
``config.yaml`` (a fine-tuned checkpoint keeps the backbone's under ``backbone``). A Hugging Face folder goes
through ``interop/hf.py``'s ``import_hf``, which dispatches on ``config.json``'s ``model_type`` to the family's
adapter; nothing here names a family.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
from tokenizers import Tokenizer
from torch import nn

from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core import registry
from plm_toolkit.core.catalog import load_all
from plm_toolkit.core.errors import CheckpointError, ConfigError
from plm_toolkit.data.tokenization.tokenizer import load_tokenizer, vocab_from_tokenizer
from plm_toolkit.interop.checkpoint_reader import (
    FORMATS,
    check_vocabulary,
    import_hf_backbone,
    load_objective_file,
    load_plm_checkpoint,
    read_config_yaml,
    typed_objective_config,
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
    path = Path(path).expanduser()
    if not path.exists():
        raise CheckpointError(f"model.checkpoint={path}: no such file or directory")
    load_all()  # the families' adapters register their formats
    step_dir = ckpt.plm_checkpoint_dir(path)
    tokenizer, imported = None, None
    other = next((fmt for fmt in FORMATS if fmt.detect(path)), None)
    if step_dir is not None:
        model, tokenizer_file, source, kind = *load_plm_checkpoint(step_dir), step_dir, "plm_train"
    elif (path / "config.json").is_file():
        model, tokenizer_file, imported = import_hf_backbone(path)
        source, kind = path, f"hf:{json.loads((path / 'config.json').read_text()).get('model_type')}"
    elif other is not None:
        (model, tokenizer), source, kind = other.load(path), path, other.name
    else:
        kinds = [
            f"a plm-train checkpoint ({ckpt.MODEL_FILE} + {ckpt.CONFIG_FILE})",
            "a Hugging Face folder (config.json)",
        ]
        kinds += [fmt.description for fmt in FORMATS]
        raise CheckpointError(f"model.checkpoint={path}: not {', '.join(kinds[:-1])} or {kinds[-1]}")
    if dropout is not None:
        with_dropout(model, dropout)
    if tokenizer is None:
        tokenizer = load_tokenizer(tokenizer_file)
        check_vocabulary(model, tokenizer, tokenizer_file)
    # A tokenizer.json may carry the truncation and padding its creator used; tasks build their own windows.
    tokenizer.no_truncation()
    tokenizer.no_padding()
    loaded = LoadedBackbone(model, tokenizer, source, kind)
    if step_dir is not None and with_task_head:
        loaded.task_head = read_finetuned_head(step_dir, read_config_yaml(step_dir / ckpt.CONFIG_FILE), model)
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
    path = Path(path).expanduser()
    if not path.exists():
        raise CheckpointError(f"checkpoint={path}: no such file or directory")
    step_dir = ckpt.plm_checkpoint_dir(path)
    if step_dir is not None:
        model, tokenizer_file = load_plm_checkpoint(step_dir)
        saved = read_config_yaml(step_dir / ckpt.CONFIG_FILE)
        section = saved.get("objective")
        name = section.name if section is not None and "name" in section else None
        load_state = partial(load_objective_file, step_dir / ckpt.OBJECTIVE_FILE)
        objective_config = typed_objective_config(name, section) if name in registry.OBJECTIVES else None
        source, kind = step_dir, "plm_train"
    elif (path / "config.json").is_file():
        model, tokenizer_file, imported = import_hf_backbone(path)
        name, state = imported.objective, imported.objective_state
        load_state = (lambda objective: objective.load_state_dict(state)) if state else (lambda objective: None)
        objective_config = registry.OBJECTIVES.get(name).config_cls(**imported.objective_overrides)
        source, kind = path, f"hf:{json.loads((path / 'config.json').read_text()).get('model_type')}"
    else:
        raise CheckpointError(
            f"checkpoint={path}: neither a plm-train checkpoint ({ckpt.MODEL_FILE} + {ckpt.CONFIG_FILE}) nor a "
            "Hugging Face folder (config.json)"
        )
    if not type(model).capabilities & GENERATIVE:
        able = [n for n in registry.MODELS.names() if registry.MODELS.get(n).builder.capabilities & GENERATIVE]
        raise ConfigError(
            f"model={model.config.name} is bidirectional: it cannot generate text; plm-generate needs a causal or "
            f"encoder-decoder model ({', '.join(able)})"
        )
    tokenizer = load_tokenizer(tokenizer_file)
    check_vocabulary(model, tokenizer, tokenizer_file)
    tokenizer.no_truncation()
    tokenizer.no_padding()
    head = _lm_head(model, name, objective_config, load_state, vocab_from_tokenizer(tokenizer), source)
    return LoadedLanguageModel(model.eval(), head, tokenizer, source, kind)


def _lm_head(model: nn.Module, name: str | None, objective_config, load_state, vocab, source: Path):
    """The next-token scorer: the objective's (``next_token_logits``), else an encoder-decoder's own output layer
    (``logits``: a translation run, a fine-tuned seq2seq checkpoint), else, for a family whose LM head is the tied
    embedding alone (GPT), that embedding."""
    if name in registry.OBJECTIVES and objective_config is not None:
        objective = registry.OBJECTIVES.get(name).builder(objective_config, model, vocab)
        if hasattr(objective, "next_token_logits"):
            load_state(objective)
            objective.eval()
            return lambda hidden: objective.next_token_logits(model, hidden)
    if ENCODER_DECODER in type(model).capabilities:
        return model.logits
    if not getattr(type(model), "lm_head_bias", True):
        return lambda hidden: torch.nn.functional.linear(hidden, model.input_embeddings.weight)
    raise CheckpointError(
        f"{source}: no language-model head (objective {name or 'none'}); generate from a checkpoint trained with "
        "objective=clm"
    )
