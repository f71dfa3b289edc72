"""One check of the composed config before any data or model work.

Hydra and the dataclass schemas already refuse misspelt keys, wrong types and unknown group options. This step
refuses keys added with ``+`` that no schema declares, numbers out of range (NaN and infinities included), and the
combinations that are each valid alone but impossible together, and names the keys and the fix.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from plm_toolkit.config.blends import blend_problems
from plm_toolkit.config.checks import hardware_problems, kernel_problems, training_problems
from plm_toolkit.config.data_checks import data_problems
from plm_toolkit.config.finetune_checks import finetune_problems
from plm_toolkit.config.numbers import merge, number_problems
from plm_toolkit.config.overrides import keep_typed_text
from plm_toolkit.config.pairing import (
    layout_problems,
    own_check_problems,
    pairing_problems,
    recipe_problems,
    unpad_problems,
)
from plm_toolkit.config.resolve import ResolvedRun, model_class, resolve_run
from plm_toolkit.core.errors import ConfigError
from plm_toolkit.core.names import did_you_mean, key_names
from plm_toolkit.core.registry import MODELS, OBJECTIVES


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
    recipe = recipe_problems(cfg)
    if recipe:
        return recipe, None
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
    them). Once the keys are known, the text keys the command line set get the text as typed (``keep_typed_text``)
    before any value is checked. Returns a plm-train config's resolved run (``config/resolve.py``), which the run
    takes rather than resolving again."""
    found = unknown_keys(cfg)
    resolved = None
    if not found:
        keep_typed_text(cfg)
        numbers = number_problems(cfg)
        if "task" in cfg:
            found = finetune_problems(cfg)
        else:
            found, resolved = checked_run(cfg, derive_plan=not numbers)
        found = merge(found, numbers)
    if found:
        raise ConfigError("invalid configuration: " + "; ".join(found))
    return resolved
