"""One check of a composed plm-finetune (or plm-glue sub-run) config before the backbone is loaded."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from plm_toolkit.config.checks import evaluation_only, hardware_problems, kernel_problems, training_problems
from plm_toolkit.config.resolve import task_class
from plm_toolkit.core.errors import ConfigError
from plm_toolkit.core.registry import TASKS


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
    if evaluation_only(cfg.trainer):
        if not d.validation_file:
            zero = "trainer.epochs=0" if cfg.trainer.epochs == 0 else "trainer.max_steps=0"
            out.append(f"{zero} evaluates without training: give data.validation_file")
    elif not d.train_file:
        out.append("data.train_file is not set: give the task's training file (or evaluate only: trainer.epochs=0)")
    elif cfg.trainer.get("early_stopping_patience", 0) > 0 and not d.validation_file:
        out.append(
            f"trainer.early_stopping_patience={cfg.trainer.early_stopping_patience}: early stopping compares "
            "evaluations, and there is no data.validation_file to evaluate on, so the run would train its whole "
            "length; give data.validation_file, or trainer.early_stopping_patience=0"
        )
    out += task_class(cfg.task.name).file_problems(cfg.task, d)
    if d.max_seq_len < 8:
        out.append(f"data.max_seq_len={d.max_seq_len}: needs at least 8 tokens")
    if d.num_workers < 0:
        out.append(f"data.num_workers={d.num_workers}: must be 0 (load in the training process) or positive")
    for key in ("max_train_samples", "max_eval_samples"):
        if d[key] is not None and d[key] < 1:
            out.append(f"data.{key}={d[key]}: must be at least 1 (or null for all)")
    if cfg.model.dropout is not None and not 0.0 <= cfg.model.dropout < 1.0:
        out.append(f"model.dropout={cfg.model.dropout}: expected a probability in [0, 1)")
    for key in ("labels", "label_words"):
        names = [str(name) for name in cfg.task.get(key) or []]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            out.append(
                f"task.{key}={names}: {', '.join(map(repr, repeated))} more than once; each class needs a name of its "
                "own (a repeated one leaves a class no example can have)"
            )
    if cfg.trainer.phases:
        out.append("trainer.phases are for pretraining (plm-train); a fine-tuning run has one length")
    if cfg.hardware.get("unpad"):
        out.append(
            "hardware.unpad=true is for pretraining (plm-train objective=mlm); fine-tuning trims each batch to its "
            "longest row and groups rows by length instead (trainer.group_by_length)"
        )
    f = cfg.finetune
    for key in ("encoder_hidden_size", "encoder_layers"):
        if f[key] < 1:
            out.append(f"finetune.{key}={f[key]}: must be at least 1")
    if not 0.0 <= f.dropout < 1.0:
        out.append(f"finetune.dropout={f.dropout}: expected a probability in [0, 1)")
    out += training_problems(cfg.trainer, cfg.optimizer, d_model_from_backbone=True, zero_length=True)
    return out + hardware_problems(cfg.hardware) + kernel_problems(cfg.optimizer, cfg.hardware)
