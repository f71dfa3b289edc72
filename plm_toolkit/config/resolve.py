"""A plm-train config resolved in one step, which validation and the run both take: the choices ``auto`` leaves
open, the objective's data plan, and the config saved with every checkpoint.

The objective answers twice, by necessity: as a class for its data plan (layout, window, order, where knowledge
units come from), which the data needs before anything is built, and as a module for its batch transform, which
needs the vocabulary; the run joins the two (``plan.with_transform(objective.batch_transform())``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from plm_toolkit.core.choices import choice
from plm_toolkit.core.registry import MODELS, OBJECTIVES, TASKS
from plm_toolkit.data.layouts.plan import DataPlan

# The model config's vocabulary facts that the tokenizer decides when the preset leaves them null.
VOCABULARY_KEYS = ("vocab_size", "pad_token_id", "bos_token_id", "eos_token_id")


def objective_class(name: str) -> type:
    """The Objective subclass behind a registered name (the builder itself, or named in the entry's info)."""
    entry = OBJECTIVES.get(name)
    return entry.info.get("cls", entry.builder)


def model_class(name: str) -> type:
    entry = MODELS.get(name)
    return entry.info.get("cls", entry.builder)


def task_class(name: str) -> type:
    entry = TASKS.get(name)
    return entry.info.get("cls", entry.builder)


def resolved_tokenizer_kind(cfg: DictConfig) -> str:
    """data.tokenizer.kind with ``auto`` resolved: the model preset's vocabulary (``model.tokenizer``), else wordpiece
    (a family without one). The one place that decides it: the resolved data group (``ResolvedRun.data``) carries
    the answer to the data build and the saved config."""
    kind = choice(cfg.data.tokenizer.kind)
    return kind if kind != "auto" else choice(cfg.model.get("tokenizer", "wordpiece"))


@dataclass(frozen=True)
class ResolvedRun:
    # The data group with data.tokenizer.kind resolved.
    data: DictConfig
    # The objective's data plan, without its batch transform.
    plan: DataPlan
    # trainer.phases: (data.max_seq_len, the plan at that length) of each phase, in order.
    phase_plans: tuple[tuple[int, DataPlan], ...] = ()


def resolve_run(cfg: DictConfig) -> ResolvedRun:
    """The data group and the objective's data plan of a plm-train config, each phase's plan too; ConfigError when
    the objective cannot read the data as configured (validation reports it with the other problems). Validation
    resolves the config and hands the result to the run (``validate`` returns it), so this runs once."""
    data = OmegaConf.merge(cfg.data, {"tokenizer": {"kind": resolved_tokenizer_kind(cfg)}})
    objective = objective_class(cfg.objective.name)
    plan = objective.data_plan(cfg.objective, cfg.data, cfg.model)
    phase_plans = []
    for phase in cfg.trainer.get("phases") or ():
        at_length = OmegaConf.merge(cfg.data, {"max_seq_len": phase.max_seq_len})
        phase_plans.append((int(phase.max_seq_len), objective.data_plan(cfg.objective, at_length, cfg.model)))
    return ResolvedRun(data, plan, tuple(phase_plans))


def saved_config(cfg: DictConfig, model_config: Any, data: DictConfig) -> dict:
    """The config saved with every checkpoint: interpolations resolved, data.tokenizer.kind as the run resolved it
    (``data``: ``ResolvedRun.data``), and the vocabulary size and token ids the model was built with
    (``model_config``) where the preset left them null."""
    saved = OmegaConf.to_container(cfg, resolve=True)
    for key in VOCABULARY_KEYS:
        if key in saved["model"]:
            saved["model"][key] = getattr(model_config, key)
    saved["data"]["tokenizer"]["kind"] = choice(data.tokenizer.kind)
    return saved


def saved_finetune_config(cfg: DictConfig, optimizer: DictConfig, task: Any, backbone: Any) -> dict:
    """The config saved with a plm-finetune checkpoint: interpolations resolved, the optimizer as the run used it
    (optimizer.d_model from the backbone), the task's config with what the data decided (its labels), and the
    backbone's architecture, so that the checkpoint loads without the original."""
    saved = OmegaConf.to_container(cfg, resolve=True)
    saved["optimizer"] = OmegaConf.to_container(optimizer, resolve=True)
    saved["task"] = OmegaConf.to_container(OmegaConf.structured(task), resolve=True)
    saved["backbone"] = OmegaConf.to_container(OmegaConf.structured(backbone), resolve=True)
    return saved
