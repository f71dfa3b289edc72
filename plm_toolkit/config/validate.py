"""One check of the composed config before any data or model work.

Hydra and the dataclass schemas already refuse misspelt keys, wrong types and unknown group options. This step
refuses keys added with ``+`` that no schema declares, numbers out of range (NaN and infinities included), and the
combinations that are each valid alone but impossible together, and names the keys and the fix.
"""

from __future__ import annotations

import inspect
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from plm_toolkit.config.blends import blend_problems
from plm_toolkit.config.checks import (
    hardware_problems,
    kernel_problems,
    model_field_problems,
    phase_problems,
    recipe_problems,
    training_problems,
)
from plm_toolkit.config.data_checks import file_problems, parallel_problems, store_problems, tokenizer_problems
from plm_toolkit.config.finetune_checks import finetune_problems
from plm_toolkit.config.numbers import merge, number_problems
from plm_toolkit.config.overrides import keep_typed_text
from plm_toolkit.config.resolve import ResolvedRun, model_class, objective_class, resolve_run
from plm_toolkit.core.capabilities import CHARACTERS, SEGMENTS
from plm_toolkit.core.errors import ConfigError
from plm_toolkit.core.names import did_you_mean, key_names
from plm_toolkit.core.registry import MODELS, OBJECTIVES
from plm_toolkit.data.layouts.registry import layout_of
from plm_toolkit.data.sources.user_files import not_a_file
from plm_toolkit.data.store.given import KEYS, given_entries


def unknown_keys(cfg: DictConfig) -> list[str]:
    """Keys that no schema declares: a typo Hydra let through because it was added with ``+`` (``+trainer.max_step=5``
    would otherwise be stored and ignored). Each message suggests the closest real key."""
    out: list[str] = []

    def walk(node: DictConfig, prefix: str) -> None:
        names = key_names(OmegaConf.get_type(node))
        for key in node:
            full = f"{prefix}{key}"
            if names and key not in names:
                valid = "" if did_you_mean(str(key), names) else f" (valid keys: {', '.join(names)})"
                out.append(f"{full}: unknown key{did_you_mean(str(key), names, prefix)}{valid}")
                continue
            child = node._get_node(key)
            if isinstance(child, DictConfig) and not child._is_missing() and not child._is_none():
                walk(child, f"{full}.")

    walk(cfg, "")
    return out


def pairing_problems(cfg: DictConfig) -> list[str]:
    """Whether the model can serve the objective: the capabilities the objective needs, characters against token
    ids, two segments."""
    m, o = cfg.model, cfg.objective
    out: list[str] = []
    provided = model_class(m.name).capabilities
    needed = objective_class(o.name).required_capabilities
    if not needed <= provided:
        lacking = ", ".join(sorted(needed - provided))
        able = [n for n in MODELS.names() if needed <= model_class(n).capabilities]
        out.append(
            f"objective={o.name} needs a model that is {lacking}; model={m.name} is not. "
            f"Models that can serve it: {', '.join(able) or 'none yet'}"
        )
    if CHARACTERS in provided and CHARACTERS not in needed:
        out.append(
            f"model={m.name} reads words as characters; objective={o.name} feeds token ids. Objectives for it: "
            + ", ".join(n for n in OBJECTIVES.names() if CHARACTERS in objective_class(n).required_capabilities)
        )
    if SEGMENTS in needed and m.get("type_vocab_size", 2) < 2:
        out.append(
            f"objective={o.name} feeds two segments (token types 0 and 1); model.type_vocab_size="
            f"{m.type_vocab_size} has one (RoBERTa's): set model.type_vocab_size=2 or pick objective=mlm"
        )
    return out


def own_check_problems(cfg: DictConfig) -> list[str]:
    """The model's field ranges, then the objective's and the family's own checks (``check_config``, ``check_data``)."""
    m, o, d = cfg.model, cfg.objective, cfg.data
    out: list[str] = []
    sizes = model_field_problems(m)
    out += sizes
    for check in (
        lambda: objective_class(o.name).check_config(o),
        lambda: objective_class(o.name).check_data(o, d),
        *([] if sizes else [lambda: model_class(m.name).check_config(m)]),
    ):
        try:
            check()
        except ConfigError as err:
            out.append(str(err))
    return out


def layout_problems(cfg: DictConfig, resolved: ResolvedRun | None) -> list[str]:
    """The objective's layout against the data preset, the length against the position table, and the phases."""
    m, o, d, t = cfg.model, cfg.objective, cfg.data, cfg.trainer
    out: list[str] = []
    reads_pairs = layout_of(objective_class(o.name).natural_layout).parallel_text
    parallel = "source_lang" in d
    if reads_pairs and not parallel:
        out.append(f"objective={o.name} trains on sentence pairs: set data=parallel (data.train_files=[corpus/train])")
    elif parallel and not reads_pairs:
        out.append(
            f"data=parallel holds sentence pairs, which objective={o.name} does not read; pick "
            "objective=translation or another data preset"
        )
    longest = model_class(m.name).max_length(m)
    if longest is not None and d.max_seq_len > longest:
        offset = m.get("position_offset", 0)
        shifted = f" - model.position_offset={offset}" if offset else ""
        out.append(
            f"data.max_seq_len={d.max_seq_len} exceeds model.max_position_embeddings={m.max_position_embeddings}"
            f"{shifted}; lower data.max_seq_len or raise model.max_position_embeddings"
        )
    plan = resolved.plan if resolved else None
    out += phase_problems(t, plan.layout if plan else "", bool(plan and plan.streams), longest)
    if d.max_seq_len < 8:
        out.append(f"data.max_seq_len={d.max_seq_len}: needs at least 8 tokens")
    return out


def data_problems(cfg: DictConfig) -> list[str]:
    """The data group: its numbers, the token store's keys, the vocabulary to train, the files or the store."""
    m, d = cfg.model, cfg.data
    out: list[str] = []
    if d.num_workers < 0:
        out.append(f"data.num_workers={d.num_workers}: must be 0 (load in the training process) or positive")
    out += store_problems(d)
    out += tokenizer_problems(cfg)
    if m.get("vocab_size") is not None and d.tokenizer.path is None and m.vocab_size < d.tokenizer.vocab_size:
        out.append(
            f"model.vocab_size={m.vocab_size} is smaller than data.tokenizer.vocab_size={d.tokenizer.vocab_size}; "
            "leave model.vocab_size=null to take the tokenizer's size"
        )
    for key in ("short_seq_prob", "random_next_prob"):
        if not 0.0 <= d[key] <= 1.0:
            out.append(f"data.{key}={d[key]}: expected a probability in [0, 1]")
    if d.get("pair_draws", 1) < 1:
        out.append(f"data.pair_draws={d.pair_draws}: expected how many times to draw the sentence pairs, 1 or more")
    parallel = "source_lang" in d
    if parallel and not d.train_files:
        out.append(
            "data.train_files is empty: give data.train_files=[corpus/train] (reads corpus/train.<lang> for "
            "data.source_lang and data.target_lang) or a .jsonl file with one key per language"
        )
    elif not d.train_files and not d.dataset_path and not d.get("store") and not d.get("sources"):
        out.append("data.train_files is empty and data.dataset_path is not set: give one (or use data=default)")
    out += parallel_problems(d) if parallel else file_problems(d)
    if d.dataset_path and not Path(d.dataset_path).expanduser().is_dir():
        out.append(f"data.dataset_path={d.dataset_path} is not a directory written by datasets' save_to_disk")
    given = [f"data.{KEYS[split]}" for split in KEYS if not parallel and given_entries(d, split)]
    if d.dataset_path and given:  # the saved dataset replaces the files: they would be ignored
        out.append(f"data.dataset_path and {' and '.join(given)} are both given; the saved dataset replaces the "
                   "files, which would be ignored: give one")  # fmt: skip
    if d.tokenizer.path and not_a_file(d.tokenizer.path):
        out.append(
            f"data.tokenizer.path={d.tokenizer.path} is not a file ({not_a_file(d.tokenizer.path)}); expected a "
            "tokenizer.json, vocab.txt or vocab.json"
        )
    return out


def unpad_problems(cfg: DictConfig) -> list[str]:
    """hardware.unpad packs rows for objectives that read packed rows, on families whose forward takes positions."""
    m, o = cfg.model, cfg.objective
    if not cfg.hardware.get("unpad"):
        return []

    def takes_positions(name: str) -> bool:
        return "position_ids" in inspect.signature(model_class(name).forward).parameters

    if objective_class(o.name).reads_packed_rows and takes_positions(m.name):
        return []
    packed = ", ".join(n for n in OBJECTIVES.names() if objective_class(n).reads_packed_rows)
    families = ", ".join(n for n in MODELS.names() if takes_positions(n))
    return [
        f"hardware.unpad=true packs sequences for objective={packed} on models that take positions ({families}); "
        f"objective={o.name} with model={m.name} keeps padded rows: set hardware.unpad=false"
    ]


def checked_run(cfg: DictConfig, derive_plan: bool = True) -> tuple[list[str], ResolvedRun | None]:
    """Every impossible setting of a plm-train config, one message each, and the run resolved (``resolve_run``)
    when it could be; ``derive_plan=False`` when a number is none a key can mean (the plan computes with them: span
    corruption's window search never ends for a length of 2^70)."""
    m, o = cfg.model, cfg.objective
    if m.name not in MODELS:
        return [f"model.name={m.name}: unknown model; valid: {', '.join(MODELS.names())}"], None
    if o.name not in OBJECTIVES:
        return [f"objective.name={o.name}: unknown objective; valid: {', '.join(OBJECTIVES.names())}"], None
    # The rest would only list what follows from the wrong family.
    if recipe_problems(cfg):
        return recipe_problems(cfg), None
    out = pairing_problems(cfg)
    checks = own_check_problems(cfg)
    out += checks
    # The plan is derived from the objective's and model's values: only once they passed.
    resolved = None
    if not checks and derive_plan:
        try:
            resolved = resolve_run(cfg)
        except ConfigError as err:
            out.append(str(err))
    out += layout_problems(cfg, resolved)
    out += model_class(m.name).run_problems(cfg)
    out += data_problems(cfg) + blend_problems(cfg, resolved.plan if resolved else None) + unpad_problems(cfg)
    out += training_problems(cfg.trainer, cfg.optimizer) + hardware_problems(cfg.hardware)
    out += kernel_problems(cfg.optimizer, cfg.hardware)
    return out, resolved


def problems(cfg: DictConfig, derive_plan: bool = True) -> list[str]:
    """Every impossible setting of a plm-train config, one message each (``checked_run``)."""
    return checked_run(cfg, derive_plan)[0]


def validate(cfg: DictConfig) -> ResolvedRun | None:
    """Raise one ConfigError listing every problem on one line; unknown keys first, alone (the rest may hinge on
    them). First, the text keys the command line set get the text as typed (``keep_typed_text``). Returns a
    plm-train config's resolved run (``config/resolve.py``), which the run takes rather than resolving again."""
    keep_typed_text(cfg)
    found = unknown_keys(cfg)
    resolved = None
    if not found:
        numbers = number_problems(cfg)
        if "task" in cfg:
            found = finetune_problems(cfg)
        else:
            found, resolved = checked_run(cfg, derive_plan=not numbers)
        found = merge(found, numbers)
    if found:
        raise ConfigError("invalid configuration: " + "; ".join(found))
    return resolved
