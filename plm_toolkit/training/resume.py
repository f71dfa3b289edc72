"""Where a run starts: afresh, or from a checkpoint whose config agrees with the run's.

A resume compares the run's config with the checkpoint's ``config.yaml`` key by key, before any data work. What may
change (``MAY_CHANGE``): how long the run lasts, how often it logs, evaluates and saves, what it is evaluated on,
how its data is loaded, and the hardware; the batch's split into ``trainer.batch_size`` x
``trainer.grad_accum_steps`` x processes, as long as the global batch stays. Every other key decides what is trained
(model, objective, training data and tokenizer, optimizer and schedule, seed): a change is refused naming the keys,
unless ``trainer.resume_changes=accept``. A checkpoint of another model family, task or command is always refused.

A run directory that holds checkpoints is never started afresh by accident: ``trainer.resume=none`` there is refused
unless ``trainer.overwrite=true``, which deletes the earlier run's checkpoints and metrics first.
"""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from plm_toolkit.config.checks import evaluation_only
from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core.errors import CheckpointError, ConfigError
from plm_toolkit.core.launch import launched_world_size
from plm_toolkit.core.schema import TrainerConfig
from plm_toolkit.interop.checkpoint_reader import read_config_yaml
from plm_toolkit.training.distributed import ProcessInfo, broadcast_object
from plm_toolkit.training.logging import MetricsWriter

log = logging.getLogger("plm_toolkit")

# Keys a resume may change: they decide how long and how the run goes on, not what it trains.
MAY_CHANGE = {
    *(f"trainer.{key}" for key in ("max_steps", "epochs", "time_budget", "log_every", "eval_every", "eval_batches")),
    *(f"trainer.{key}" for key in ("save_every", "keep_last", "resume", "overwrite", "resume_changes")),
    *(f"trainer.{key}" for key in ("tensorboard", "progress_bar", "loggers", "eval_strategy", "signal_grace")),
    "trainer.eval_at_end",
    *(f"trainer.{key}" for key in ("load_best_model_at_end", "metric_for_best_model", "greater_is_better")),
    *(f"trainer.{key}" for key in ("early_stopping_patience", "early_stopping_threshold")),
    *(f"data.{key}" for key in ("validation_files", "validation_file", "max_eval_samples", "cache_dir", "num_workers")),
    "data.sources.validation_files",
}
MAY_CHANGE_SECTIONS = ("hardware.",)
# May change while the global batch (their product with the number of processes) stays the same.
BATCH_KEYS = ("trainer.batch_size", "trainer.grad_accum_steps")
# Files of a run that trainer.overwrite=true deletes.
RUN_OUTPUTS = ("checkpoints", "metrics.jsonl", "eval_results.json", "tensorboard")
FRESH = ("none", "", "null")


def starting_checkpoint(cfg: DictConfig, run_dir: Path, is_main: bool) -> ckpt.Checkpoint | None:
    """The checkpoint the run continues (None: a fresh start), after refusing a fresh start over an earlier run's
    checkpoints and a resume whose config changed what is trained."""
    trainer = cfg.trainer
    resume = str(trainer.resume)
    held = ckpt.list_checkpoints(run_dir / "checkpoints")
    if trainer.overwrite:
        if resume not in (*FRESH, "auto"):
            raise ConfigError(
                f"trainer.overwrite=true starts afresh; it cannot be combined with trainer.resume={resume} (give "
                "trainer.resume=none, or leave trainer.overwrite=false to resume)"
            )
        if held and is_main:
            clear_run(run_dir)
        return None
    if resume in FRESH and held:
        raise ConfigError(
            f"trainer.resume={resume}: {run_dir} holds the checkpoints of an earlier run (newest: {held[-1].name}), "
            "and a fresh start there would mix the two runs; resume it (trainer.resume=auto), give another "
            "hydra.run.dir, or replace it with trainer.overwrite=true (deletes its checkpoints and metrics)"
        )
    checkpoint = ckpt.find_checkpoint(resume, run_dir)
    if checkpoint is not None:
        check_changes(cfg, checkpoint, is_main)
    return checkpoint


def clear_run(run_dir: Path) -> None:
    """Delete what an earlier run wrote into ``run_dir`` (trainer.overwrite=true)."""
    removed = []
    for name in RUN_OUTPUTS:
        path = run_dir / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        else:
            continue
        removed.append(name)
    log.warning("trainer.overwrite=true: deleted the earlier run's %s in %s", ", ".join(removed), run_dir)


def flatten(tree, prefix: str = "") -> dict:
    """A nested config as {dotted key: value}; a list of sections is keyed by position (``data.sources[1].weight``,
    so that a change names the key that changed); other lists are values."""
    if not isinstance(tree, dict):
        return {prefix.rstrip("."): tree}
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        elif isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
            out[f"{prefix}{key}"] = len(value)  # a section added or removed: the count differs
            for number, item in enumerate(value):
                out.update(flatten(item, f"{prefix}{key}[{number}]."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def base_key(key: str) -> str:
    """``data.sources[1].validation_files`` -> ``data.sources.validation_files``: the key MAY_CHANGE names."""
    return re.sub(r"\[\d+\]", "", key)


def derived(key: str, value) -> bool:
    """A value the run derives after this check (null: the tokenizer's size, the checkpoint's; auto; an empty label
    list: the data's; plm-finetune's optimizer.d_model=0: the backbone's width): nothing to compare yet."""
    return value is None or value == "auto" or value == [] or (key == "optimizer.d_model" and value == 0)


def describe(config: dict) -> str:
    """What a config trains, in a few words: ``plm-train model=gpt2 objective=clm`` / ``plm-finetune task=sst2``."""
    if isinstance(config.get("task"), dict):
        return f"plm-finetune task={config['task'].get('name')}"
    model, objective = config.get("model") or {}, config.get("objective") or {}
    return f"plm-train model={model.get('name')} objective={objective.get('name')}"


def shown(value) -> str:
    return (",".join(map(str, value)) or "[]") if isinstance(value, list) else str(value)


def contrast(old, new) -> str:
    """``old -> new``, each cut to about 60 characters around where the two first differ, so that what changed
    shows (two long paths that differ in the middle are not cut to the same ends)."""
    old, new = shown(old), shown(new)
    if len(old) <= 60 and len(new) <= 60:
        return f"{old} -> {new}"
    start = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new)))
    start = max(start - 20, 0)

    def cut(text: str) -> str:
        piece = text[start : start + 56]
        return ("..." if start else "") + piece + ("..." if start + 56 < len(text) else "")

    return f"{cut(old)} -> {cut(new)}"


def changes(run: dict, saved: dict, world_sizes: tuple[int, int]) -> tuple[list[str], list[str]]:
    """(changes a resume may make, changes it refuses), each as ``key old -> new``, over the keys both configs
    have."""
    ours, theirs = flatten(run), flatten(saved)
    allowed, refused = [], []
    for key in sorted(ours.keys() & theirs.keys()):
        old, new = theirs[key], ours[key]
        if old == new or derived(key, new):
            continue
        line = f"{key} {contrast(old, new)}"
        batch_kept = key in BATCH_KEYS and global_batch(run, world_sizes[1]) == global_batch(saved, world_sizes[0])
        may = base_key(key) in MAY_CHANGE or key.startswith(MAY_CHANGE_SECTIONS) or batch_kept
        (allowed if may else refused).append(line)
    return allowed, refused


def global_batch(config: dict, world_size: int) -> int | None:
    trainer = config.get("trainer") or {}
    try:
        return int(trainer["batch_size"]) * int(trainer["grad_accum_steps"]) * world_size
    except (KeyError, TypeError, ValueError):
        return None


def check_changes(cfg: DictConfig, checkpoint: ckpt.Checkpoint, is_main: bool) -> None:
    """Refuse a checkpoint of another family, task or command, and changes to what is trained unless
    trainer.resume_changes=accept; log the changes that go on."""
    path = checkpoint.path / ckpt.CONFIG_FILE
    saved = OmegaConf.to_container(read_config_yaml(path), resolve=False)
    run = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    if describe(saved) != describe(run):
        raise CheckpointError(
            f"{checkpoint.path}: holds a {describe(saved)} run; this is {describe(run)}, which cannot resume it: "
            "give another hydra.run.dir (or trainer.resume=PATH of a checkpoint of this model), or replace that run "
            "with trainer.resume=none trainer.overwrite=true"
        )
    state = checkpoint.trainer_state(mmap=True)
    if cfg.trainer.max_steps is not None:  # with trainer.epochs, the length is known once the data is
        check_length(cfg.trainer, int(cfg.trainer.max_steps), int(state["step"]), checkpoint)
    world_sizes = (int(state.get("world_size", 1)), launched_world_size())
    allowed, refused = changes(run, saved, world_sizes)
    if any(line.startswith("data.tokenizer.path ") for line in refused) and holds_checkpoint_tokenizer(run, checkpoint):
        # A resume reads the checkpoint's own tokenizer; a path to the same tokenizer elsewhere (the checkpoint's
        # copy, where the model.checkpoint it started from has moved) changes nothing.
        moved = [line for line in refused if line.startswith("data.tokenizer.path ")]
        allowed, refused = allowed + moved, [line for line in refused if line not in moved]
    if evaluation_only(cfg.trainer):  # nothing is trained: what changed decides nothing (plm-finetune trainer.epochs=0)
        allowed, refused = allowed + refused, []
    accept = getattr(cfg.trainer.resume_changes, "value", cfg.trainer.resume_changes) == "accept"
    if refused and not accept:
        raise ConfigError(
            f"trainer.resume: the run's config differs from {path} in what is trained: {'; '.join(refused)}. "
            "trainer.resume_changes=accept goes on from the checkpoint with the new values; otherwise resume with "
            "the old ones, or start afresh (another hydra.run.dir, or trainer.resume=none trainer.overwrite=true)"
        )
    if is_main and allowed:
        log.info("resuming with changed settings: %s", "; ".join(allowed))
    if is_main and refused:
        log.warning("trainer.resume_changes=accept: resuming with a changed recipe: %s", "; ".join(refused))


def holds_checkpoint_tokenizer(run: dict, checkpoint: ckpt.Checkpoint) -> bool:
    """Whether the run's data.tokenizer.path holds the very tokenizer the checkpoint saved."""
    given = ((run.get("data") or {}).get("tokenizer") or {}).get("path")
    own = checkpoint.path / ckpt.TOKENIZER_FILE
    try:
        return bool(given) and Path(given).read_bytes() == own.read_bytes()
    except OSError:
        return False


def final_evaluation_missing(
    trainer_cfg: TrainerConfig,
    step: int,
    max_steps: int,
    evaluates_at_end: bool,
    metrics: MetricsWriter,
    process: ProcessInfo,
) -> bool:
    """A resumed run with nothing left to train (at ``step`` of ``max_steps``, or its trainer.time_budget spent) says
    so; True when its final evaluation is missing from metrics.jsonl (it failed, or the run was stopped during it),
    which the run then makes up for."""
    spent = step < max_steps
    why = f"trainer.time_budget={trainer_cfg.time_budget:g} hours spent" if spent else f"{max_steps} steps"
    if process.is_main:
        log.info("already finished at step %d (%s): nothing to train", step, why)
    if not evaluates_at_end or broadcast_object(metrics.has_evaluation(step), process):
        return False
    log.info("the final evaluation of step %d is missing from %s: evaluating", step, metrics.path)
    return True


def check_length(trainer_cfg, max_steps: int, step: int, checkpoint: ckpt.Checkpoint) -> None:
    """Refuse a resumed run whose length ends before the checkpoint's ``step`` (0 steps: plm-finetune's evaluation)."""
    if 0 < max_steps < step:
        length = f"trainer.epochs={trainer_cfg.epochs:g}" if trainer_cfg.max_steps is None else "trainer.max_steps"
        raise ConfigError(
            f"{length}: the run would end at step {max_steps}, but {checkpoint.path} is at step {step} already; give "
            "a longer run to go on from it, or start afresh (trainer.resume=none trainer.overwrite=true, or another "
            "hydra.run.dir)"
        )
