"""Whether the model, the objective and the data go together: a paper recipe's families, the capabilities the
objective needs of the model, the model's field ranges and the family's and objective's own checks, the objective's
layout against the data and the position table (trainer.phases too), and hardware.unpad's packed rows."""

from __future__ import annotations

import inspect

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from plm_toolkit.config.checks import check_range, finite, model_field_problems
from plm_toolkit.config.resolve import ResolvedRun, model_class, objective_class
from plm_toolkit.core.capabilities import CHARACTERS, SEGMENTS
from plm_toolkit.core.errors import ConfigError
from plm_toolkit.core.registry import MODELS, OBJECTIVES
from plm_toolkit.data.layouts.registry import LAYOUTS, layout_of


def recipe_problems(cfg) -> list[str]:
    """A paper recipe (experiment=...) asked of a model family it is not written for, named by the preset the
    command line chose where Hydra knows it."""
    recipe = cfg.get("recipe")
    if recipe is None or not recipe.families or cfg.model.name in recipe.families:
        return []
    preset = _chosen("model") or cfg.model.name
    families = " or ".join(recipe.families)
    return [
        f"experiment={recipe.name} is a recipe for {families} models and model={preset} is a {cfg.model.name} "
        f"model: pick a {families} preset (model={recipe.families[0]}_...) or leave out experiment="
    ]


def _chosen(group: str) -> str | None:
    """The option of a config group that Hydra composed (None outside a Hydra run)."""
    return HydraConfig.get().runtime.choices.get(group) if HydraConfig.initialized() else None


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


def phase_problems(t, layout: str, streams: bool, longest: int | None) -> list[str]:
    """trainer.phases: shares that sum to 1 and each last a step, lengths the model holds, a layout that a phase
    can end in the middle of (not streams, whose rows continue from batch to batch, nor sentence pairs for
    translation), and a run length in steps."""
    phases = list(t.get("phases") or [])
    if not phases:
        return []
    out: list[str] = []
    if t.max_steps is None:
        out.append("trainer.phases are shares of trainer.max_steps: give trainer.max_steps, not trainer.epochs")
    if streams or (layout in LAYOUTS and not LAYOUTS[layout].phases):
        out.append(f"trainer.phases: the {layout} layout cannot change its sequence length within a run")
    for i, phase in enumerate(phases):
        key = f"trainer.phases[{i}]"
        check_range(out, f"{key}.fraction", phase.fraction, 0.0, 1.0, low_open=True)
        if t.max_steps is not None and finite(phase.fraction) and round(phase.fraction * t.max_steps) < 1:
            out.append(f"{key}.fraction={phase.fraction}: less than one of trainer.max_steps={t.max_steps}")
        if phase.max_seq_len < 8 or (longest is not None and phase.max_seq_len > longest):
            most = f" and at most the model's {longest} positions" if longest is not None else ""
            out.append(f"{key}.max_seq_len={phase.max_seq_len}: needs at least 8 tokens{most}")
        if phase.batch_size < 0:
            out.append(f"{key}.batch_size={phase.batch_size}: must be 0 (trainer.batch_size) or positive")
    total = sum(p.fraction for p in phases if finite(p.fraction))
    if abs(total - 1.0) > 1e-6:
        out.append(f"trainer.phases: the fractions sum to {total:g}; they must sum to 1")
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
