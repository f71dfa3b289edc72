"""Continued pretraining: ``plm-train model.checkpoint=PATH`` starts a new run from released weights.

    plm-train model.checkpoint=/models/all-MiniLM-L6-v2 objective=mlm data.train_files=[domain.txt]
    plm-train model.checkpoint=runs/gpt2/checkpoints/last data.train_files=[other.txt]

The checkpoint (a local Hugging Face folder, a plm-train checkpoint or run directory, a bilm-tf folder) sets the
family and every architecture field, and its tokenizer is used as it is (the token store is prepared with it). What
a user may sensibly change (dropout, the initializer of fresh heads, memory lengths) may be overridden; a preset or
an override that contradicts the checkpoint is refused naming the key. The objective is the checkpoint's unless
``objective=`` is given; its heads come from the checkpoint where it has them (``load_starting_weights``), the others
start as the objective builds them. Step, optimizer and schedule start afresh: a new run, not a resume.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from tokenizers import Tokenizer
from torch import nn

from plm_toolkit.config.data_checks import extension_problems
from plm_toolkit.config.resolve import objective_class
from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core import registry
from plm_toolkit.core.atomic import write_text
from plm_toolkit.core.errors import CheckpointError, ConfigError, PlmError
from plm_toolkit.interop.checkpoint_reader import read_checkpoint, read_config_yaml
from plm_toolkit.training.vocabulary_extension import extend_vocabulary

log = logging.getLogger("plm_toolkit")

# Model fields a continued run may set otherwise than its checkpoint: they change how the weights are trained or
# read, not what they are. The trainer fills the vocabulary size and token ids from the tokenizer.
ADJUSTABLE = frozenset({"initializer_range", "initializer_factor", "mem_len", "eval_mem_len", "clamp_len", "bi_data"})
FILLED = frozenset({"checkpoint", "vocab_size", "pad_token_id", "bos_token_id", "eos_token_id", "tokenizer"})
CHECKPOINT_TOKENIZER = "checkpoint_tokenizer.json"


def adjustable(name: str) -> bool:
    return "dropout" in name or name in ADJUSTABLE


@dataclass
class StartingPoint:
    """What a checkpoint folder holds for a continued run."""

    path: Path
    # "plm_train", "hf:<model_type>" or a registered format's name.
    kind: str
    model_config: Any
    model_state: dict[str, torch.Tensor]
    tokenizer: Tokenizer
    # The tokenizer's file where the checkpoint has one (the token store's settings name it).
    tokenizer_file: Path | None
    # The objective whose layout ``objective_state`` follows, and its config section or the values it implies.
    objective: str | None = None
    objective_values: dict[str, Any] = field(default_factory=dict)
    objective_state: dict[str, torch.Tensor] = field(default_factory=dict)


def read_starting_point(path: str | Path, generator: str | None = None) -> StartingPoint:
    """The weights, config, tokenizer and objective heads of ``model.checkpoint``; ``generator``: ELECTRA's
    generator folder (objective.generator_checkpoint)."""
    found = read_checkpoint(path, **({"generator_folder": generator} if generator else {}))
    head = found.imported.task_head if found.imported is not None else None
    if head is not None:
        log.info("model.checkpoint=%s: its %s head is a task's, not read here", found.source, head.architecture)
    model = found.model
    return StartingPoint(
        found.source,
        found.kind,
        model.config,
        model.state_dict(),
        found.tokenizer,
        found.tokenizer_file,
        found.objective,
        found.objective_values(),
        found.objective_state(),
    )


# --- the run's config -------------------------------------------------------------------------------------------


def explicit_overrides() -> list[str]:
    """The command line's overrides (Hydra's), or none outside a Hydra app (a test composing its own config)."""
    if not HydraConfig.initialized():
        return []
    return list(HydraConfig.get().overrides.task)


def override_values(overrides: list[str]) -> dict[str, str]:
    """key -> value as written, for every ``key=value`` of the command line."""
    pairs = (item.split("=", 1) for item in overrides)
    return {pair[0].lstrip("+~"): pair[-1] for pair in pairs}


def adopt_checkpoint(cfg: DictConfig, run_dir: Path, overrides: list[str] | None = None) -> StartingPoint | None:
    """With ``model.checkpoint`` set: the run's model becomes the checkpoint's (explicit changes of adjustable fields
    kept, contradictions refused), its tokenizer the run's (``data.tokenizer.path``), and its objective the run's
    unless ``objective=`` was given. The checkpoint is read once and every decision over the config is made before
    the vocabulary is extended and the tokenizer written. Changes ``cfg`` in place; returns what the checkpoint
    holds, or None."""
    path = cfg.model.get("checkpoint")
    extend = cfg.data.tokenizer.get("extend")
    recipe = cfg.get("recipe")
    for problem in extension_problems(extend):
        raise ConfigError(problem)
    if not path:
        if recipe is not None and recipe.get("continues_checkpoint"):
            raise ConfigError(
                f"experiment={recipe.name} continues a released checkpoint: give model.checkpoint=PATH (a Hugging "
                "Face folder, a plm-train checkpoint or a bilm-tf folder)"
            )
        if extend is not None and (extend.tokens_file or extend.top_words):
            raise ConfigError("data.tokenizer.extend extends a released vocabulary: it needs model.checkpoint=PATH")
        return None
    keys = override_values(explicit_overrides() if overrides is None else overrides)
    generator = cfg.objective.get("generator_checkpoint")
    own = None if Path(path).expanduser().exists() else own_checkpoint(cfg, run_dir, path)
    start = read_starting_point(own or path, generator)
    refuse_contradictions(cfg, keys, start.model_config, path)
    continued_defaults(cfg, keys)
    adopt_objective(cfg, start, keys)
    if own is not None:  # its tokenizer is the run's, extended already where the run extended it
        log.info(
            "model.checkpoint=%s is no longer there; the run resumes from its own checkpoint %s, which holds every "
            "weight, the tokenizer and the objective's heads", path, own,
        )  # fmt: skip
    elif extend is not None and (extend.tokens_file or extend.top_words):
        extend_vocabulary(start, extend, cfg.data, int(cfg.trainer.seed))
        start.tokenizer_file = None  # the extended one is written into the run directory
    changes = {k.removeprefix("model."): cfg.model[k.removeprefix("model.")] for k in keys if k.startswith("model.")}
    changes = {k: v for k, v in changes.items() if adjustable(k)}
    new = dataclasses.replace(start.model_config, checkpoint=str(path), **changes)
    cfg.model = OmegaConf.structured(new)
    if start.tokenizer_file is not None:
        cfg.data.tokenizer.path = str(start.tokenizer_file)
    else:  # an extended or a bilm-tf vocabulary: the store reads the tokenizer as it is, written into the run directory
        written = Path(run_dir) / CHECKPOINT_TOKENIZER
        written.parent.mkdir(parents=True, exist_ok=True)
        write_text(written, start.tokenizer.to_str())  # every process writes the same file
        cfg.data.tokenizer.path = str(written)
    return start


def adopt_objective(cfg: DictConfig, start: StartingPoint, keys: dict[str, str]) -> None:
    """The checkpoint's objective becomes the run's unless ``objective=`` or a recipe chose one; a chosen objective
    that is the checkpoint's takes its head sizes (ELECTRA's generator) where the command line leaves them."""
    recipe = cfg.get("recipe")
    chosen = "objective" in keys or (recipe is not None and recipe.get("continues_checkpoint"))
    if not chosen and start.objective is not None:
        cfg.objective = objective_node(start.objective, start.objective_values, cfg, keys)
    elif start.objective == cfg.objective.name:
        for key, value in start.objective_values.items():
            if (
                f"objective.{key}" not in keys
                and key in cfg.objective
                and not OmegaConf.is_interpolation(cfg.objective, key)
            ):
                cfg.objective[key] = value


def own_checkpoint(cfg: DictConfig, run_dir: Path, source: str) -> Path | None:
    """The run's own checkpoint that ``trainer.resume`` continues, where it was started from ``source`` (its
    config.yaml names that model.checkpoint): it holds all a resume reads of the source, which may have moved since.
    None where the run starts afresh or was started from another checkpoint."""
    resume = str(cfg.trainer.resume)
    if cfg.trainer.get("overwrite") or resume in ("none", "", "null"):
        return None
    try:
        found = ckpt.find_checkpoint(resume, Path(run_dir))
        saved = read_config_yaml(found.path / ckpt.CONFIG_FILE) if found is not None else None
    except PlmError:
        return None
    if saved is None or str(saved.get("model", {}).get("checkpoint")) != str(source):
        return None
    return found.path


# A continued run's optimizer where neither the command line nor a recipe sets it: TAPT's peak learning rate and
# warm-up (Gururangan et al. 2020), a fifth of the from-scratch default, so that the released weights are not
# thrown far from where they were in the first steps.
CONTINUED_DEFAULTS = {"lr": 1e-4, "warmup_ratio": 0.06}


def continued_defaults(cfg: DictConfig, keys: dict[str, str]) -> None:
    if cfg.recipe.get("name") or "optimizer" in keys:
        return
    changed = {}
    for name, value in CONTINUED_DEFAULTS.items():
        if f"optimizer.{name}" not in keys and not (name == "warmup_ratio" and cfg.optimizer.warmup_steps):
            cfg.optimizer[name] = value
            changed[name] = value
    if changed:
        settings = " ".join(f"optimizer.{k}={v:g}" for k, v in changed.items())
        log.info("continued pretraining: %s (TAPT's; set them to change)", settings)


def refuse_contradictions(cfg: DictConfig, keys: dict[str, str], checked: Any, path: str) -> None:
    family = checked.name
    fields = {f.name for f in dataclasses.fields(checked)}
    for key in keys:
        if key.startswith("data.tokenizer.") and not key.startswith("data.tokenizer.extend."):
            raise ConfigError(
                f"{key} contradicts model.checkpoint={path}: the checkpoint's tokenizer is used as it is; leave "
                f"{key} out"
            )
        if key == "model" and cfg.model.name != family:
            raise ConfigError(
                f"model={keys[key]} contradicts model.checkpoint={path}, a {family} checkpoint: the checkpoint "
                "sets the model; leave model= out"
            )
        name = key.removeprefix("model.")
        if not key.startswith("model.") or name == "checkpoint" or adjustable(name):
            continue
        if name not in fields:
            raise ConfigError(f"{key}: the {family} checkpoint model.checkpoint={path} has no such field")
        given, held = cfg.model[name], getattr(checked, name)
        if given != held and not (name in FILLED and given is None):
            raise ConfigError(
                f"{key}={given} contradicts model.checkpoint={path}, whose {name} is {held}: the checkpoint sets the "
                "architecture (dropout may be changed)"
            )
    if "model" in keys:  # a preset of the same family: each architecture field it sets must agree
        for name in sorted(fields - FILLED):
            preset = cfg.model.get(name)
            if adjustable(name) or f"model.{name}" in keys or preset is None:
                continue
            if preset != getattr(checked, name):
                raise ConfigError(
                    f"model={keys['model']} sets model.{name}={preset}, but model.checkpoint={path} has "
                    f"{getattr(checked, name)}: the checkpoint sets the architecture; leave model= out"
                )


def objective_node(name: str, values: dict[str, Any], cfg: DictConfig, keys: dict[str, str]) -> DictConfig:
    """The config of objective ``name`` as ``objective=<name>`` composes it (its preset's values), with the
    checkpoint's ``values`` and the command line's ``objective.*`` overrides over it."""
    entry = registry.OBJECTIVES.get(name)
    node = OmegaConf.structured(entry.config_cls)
    preset = importlib.resources.files("plm_toolkit.configs") / "objective" / f"{name}.yaml"
    interpolated = set()
    if preset.is_file():
        loaded = OmegaConf.create(preset.read_text(encoding="utf-8"))
        loaded.pop("defaults", None)
        interpolated = {k for k in loaded if OmegaConf.is_interpolation(loaded, k)}
        node = OmegaConf.merge(node, loaded)
    for key, value in values.items():
        if key in node and key not in interpolated:
            node[key] = value
    for key in keys:
        if key.startswith("objective."):
            short = key.removeprefix("objective.")
            if short not in node:
                raise ConfigError(f"{key}: objective={name} (model.checkpoint's) has no such key")
            node[short] = cfg.objective[short]
    return node


# --- the weights --------------------------------------------------------------------------------------------------


def head_key(objective: str | None, key: str) -> tuple[str, str]:
    """(group, key within it) of a key of a checkpoint's objective state (``objective``: the name it saved), as that
    objective groups its heads (``Objective.head_key``); keys of an objective no longer registered keep its name."""
    if not objective or objective not in registry.OBJECTIVES:
        return objective or "", key
    return objective_class(objective).head_key(objective, key)


def load_starting_weights(start: StartingPoint, model: nn.Module, objective: nn.Module, name: str) -> None:
    """The checkpoint's backbone into ``model`` and its heads into ``objective`` (objective ``name``) where they fit;
    the heads it lacks keep the objective's own init (a tied decoder and a fresh transform: BERT's), heads that fit
    no part of this objective are dropped. One log line says which."""
    missing, unexpected = model.load_state_dict(start.model_state, strict=False)
    if missing or unexpected:
        raise CheckpointError(
            f"{start.path}: weights do not fit the model its config describes ({(missing or unexpected)[:3]})"
        )
    source = {head_key(start.objective, k): v for k, v in start.objective_state.items()}
    state = objective.state_dict()
    loaded, new, used = {}, [], set()
    for key, value in state.items():
        grouped = objective.head_key(name, key)
        found = source.get(grouped)
        if found is not None and found.shape == value.shape:
            loaded[key] = found
            used.add(grouped)
        else:
            new.append(key)
    if loaded:
        objective.load_state_dict(loaded, strict=False)
    dropped = sorted(f"{g}.{k}" if g else k for g, k in source if (g, k) not in used)
    heads = f"heads loaded: {groups(loaded) or 'none'}; new: {groups(new) or 'none'}"
    if not state:  # GPT's and T5's output layers are the model's own (tied embeddings, T5 v1.1's lm_head)
        heads = "no head of its own (its output layer is the model's)"
    log.info(
        "model.checkpoint=%s (%s): backbone loaded; objective=%s %s%s",
        start.path,
        start.kind,
        name,
        heads,
        f"; dropped (no part of objective={name}): {groups(dropped)}" if dropped else "",
    )


def groups(keys) -> str:
    """Keys shortened to their heads (``mlm.head.dense.weight`` -> ``mlm.head``, ``generator.encoder...`` ->
    ``generator``), each named once."""
    names = dict.fromkeys(k[: k.index("head") + 4] if "head" in k else k.split(".")[0] for k in keys)
    return ", ".join(names)
