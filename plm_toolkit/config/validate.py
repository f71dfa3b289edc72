"""One check of the composed config before any data or model work.

Hydra and the dataclass schemas already refuse unknown keys, wrong types and unknown group options. This step
refuses the combinations that are each valid alone but impossible together, and names the keys and the fix.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from plm_toolkit.data.plan import DataPlan
from plm_toolkit.errors import ConfigError
from plm_toolkit.models.base import SEGMENTS
from plm_toolkit.registry import MODELS, OBJECTIVES, TASKS


def _value(x) -> str:
    return x.value if hasattr(x, "value") else str(x)


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


def data_plan(cfg: DictConfig) -> DataPlan:
    """The objective's data plan for this config (without its batch transform, which needs the vocabulary)."""
    return objective_class(cfg.objective.name).data_plan(cfg.objective, cfg.data, cfg.model)


def data_layout(cfg: DictConfig) -> str:
    return data_plan(cfg).layout


def tokenizer_kind(cfg: DictConfig) -> str:
    """data.tokenizer.kind with auto resolved to the model preset's vocabulary (model.tokenizer, else wordpiece)."""
    kind = _value(cfg.data.tokenizer.kind)
    return _value(cfg.model.get("tokenizer", "wordpiece")) if kind == "auto" else kind


def training_problems(t, opt) -> list[str]:
    """Checks of the trainer and optimizer groups, shared by plm-train and plm-finetune."""
    out: list[str] = []
    for key in ("max_steps", "batch_size", "grad_accum_steps", "log_every"):
        if t[key] < 1:
            out.append(f"trainer.{key}={t[key]}: must be at least 1")
    for key in ("eval_every", "save_every", "keep_last", "eval_batches"):
        if t[key] < 0:
            out.append(f"trainer.{key}={t[key]}: must be 0 (off) or positive")
    if opt.lr <= 0:
        out.append(f"optimizer.lr={opt.lr}: must be positive")
    if len(opt.betas) != 2 or not all(0.0 <= b < 1.0 for b in opt.betas):
        out.append(f"optimizer.betas={list(opt.betas)}: expected two values in [0, 1)")
    if _value(opt.schedule) in ("noam", "inverse_sqrt") and opt.warmup_steps < 1:
        out.append(f"optimizer.schedule={_value(opt.schedule)} needs optimizer.warmup_steps >= 1")
    if not 0.0 <= opt.warmup_ratio < 1.0:
        out.append(f"optimizer.warmup_ratio={opt.warmup_ratio}: expected a value in [0, 1)")
    if opt.total_steps is not None and opt.total_steps < t.max_steps and _value(opt.schedule) in ("linear", "cosine"):
        out.append(
            f"optimizer.total_steps={opt.total_steps} is shorter than trainer.max_steps={t.max_steps}: the "
            "schedule would sit at its floor; raise it or leave it null"
        )
    return out


def problems(cfg: DictConfig) -> list[str]:
    """Every impossible setting found, one message each."""
    out: list[str] = []
    m, o, d, t, opt = cfg.model, cfg.objective, cfg.data, cfg.trainer, cfg.optimizer
    if m.name not in MODELS:
        return [f"model.name={m.name}: unknown model; valid: {', '.join(MODELS.names())}"]
    if o.name not in OBJECTIVES:
        return [f"objective.name={o.name}: unknown objective; valid: {', '.join(OBJECTIVES.names())}"]

    provided = model_class(m.name).capabilities
    needed = objective_class(o.name).required_capabilities
    if not needed <= provided:
        lacking = ", ".join(sorted(needed - provided))
        able = [n for n in MODELS.names() if needed <= model_class(n).capabilities]
        out.append(
            f"objective={o.name} needs a model that is {lacking}; model={m.name} is not. "
            f"Models that can serve it: {', '.join(able) or 'none yet'}"
        )
    if SEGMENTS in needed and m.get("type_vocab_size", 2) < 2:
        out.append(
            f"objective={o.name} feeds two segments (token types 0 and 1); model.type_vocab_size="
            f"{m.type_vocab_size} has one (RoBERTa's): set model.type_vocab_size=2 or pick objective=mlm"
        )
    for check in (
        lambda: objective_class(o.name).check_config(o),
        lambda: objective_class(o.name).check_data(o, d),
        lambda: data_plan(cfg),
        lambda: model_class(m.name).check_config(m),
    ):
        try:
            check()
        except ConfigError as err:
            out.append(str(err))

    longest = model_class(m.name).max_length(m)
    if longest is not None and d.max_seq_len > longest:
        offset = m.get("position_offset", 0)
        shifted = f" - model.position_offset={offset}" if offset else ""
        out.append(
            f"data.max_seq_len={d.max_seq_len} exceeds model.max_position_embeddings={m.max_position_embeddings}"
            f"{shifted}; lower data.max_seq_len or raise model.max_position_embeddings"
        )
    if m.get("bi_data") and t.batch_size % 2:
        out.append(
            f"model.bi_data=true reads half of every batch backwards: trainer.batch_size={t.batch_size} must be even"
        )
    if d.max_seq_len < 8:
        out.append(f"data.max_seq_len={d.max_seq_len}: needs at least 8 tokens")
    if m.get("vocab_size") is not None and d.tokenizer.path is None and m.vocab_size < d.tokenizer.vocab_size:
        out.append(
            f"model.vocab_size={m.vocab_size} is smaller than data.tokenizer.vocab_size={d.tokenizer.vocab_size}; "
            "leave model.vocab_size=null to take the tokenizer's size"
        )
    for key in ("short_seq_prob", "random_next_prob"):
        if not 0.0 <= d[key] <= 1.0:
            out.append(f"data.{key}={d[key]}: expected a probability in [0, 1]")

    if not d.train_files and not d.dataset_path:
        out.append("data.train_files is empty and data.dataset_path is not set: give one (or use data=default)")
    for key in ("train_files", "validation_files"):
        for f in d[key]:
            if not Path(f).expanduser().is_file():
                out.append(f"data.{key}: {f} is not a file")
    if d.dataset_path and not Path(d.dataset_path).expanduser().is_dir():
        out.append(f"data.dataset_path={d.dataset_path} is not a directory written by datasets' save_to_disk")
    if d.tokenizer.path and not Path(d.tokenizer.path).expanduser().is_file():
        out.append(f"data.tokenizer.path={d.tokenizer.path} is not a file (a tokenizer.json or vocab.txt)")

    out += training_problems(t, opt)
    return out


def finetune_problems(cfg: DictConfig) -> list[str]:
    """Every impossible setting of a plm-finetune config, one message each."""
    out: list[str] = []
    if OmegaConf.is_missing(cfg.model, "checkpoint"):
        out.append("model.checkpoint is not set: give a plm-train checkpoint or a local Hugging Face folder")
    elif not Path(cfg.model.checkpoint).expanduser().exists():
        out.append(f"model.checkpoint={cfg.model.checkpoint}: no such file or directory")
    if cfg.task.name not in TASKS:
        return out + [f"task.name={cfg.task.name}: unknown task; valid: {', '.join(TASKS.names())}"]
    try:
        task_class(cfg.task.name).check_config(cfg.task)
    except ConfigError as err:
        out.append(str(err))
    d = cfg.data
    if not d.train_file:
        out.append("data.train_file is not set: give the task's training file")
    for key in ("train_file", "validation_file"):
        if d[key] and not Path(d[key]).expanduser().is_file():
            out.append(f"data.{key}: {d[key]} is not a file")
    if d.max_seq_len < 8:
        out.append(f"data.max_seq_len={d.max_seq_len}: needs at least 8 tokens")
    for key in ("max_train_samples", "max_eval_samples"):
        if d[key] is not None and d[key] < 1:
            out.append(f"data.{key}={d[key]}: must be at least 1 (or null for all)")
    if cfg.model.dropout is not None and not 0.0 <= cfg.model.dropout < 1.0:
        out.append(f"model.dropout={cfg.model.dropout}: expected a probability in [0, 1)")
    return out + training_problems(cfg.trainer, cfg.optimizer)


def validate(cfg: DictConfig) -> None:
    found = finetune_problems(cfg) if "task" in cfg else problems(cfg)
    if found:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(found))
