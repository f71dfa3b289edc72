"""One check of the composed config before any data or model work.

Hydra and the dataclass schemas already refuse misspelt keys, wrong types and unknown group options. This step
refuses keys added with ``+`` that no schema declares, numbers out of range (NaN and infinities included), and the
combinations that are each valid alone but impossible together, and names the keys and the fix.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from plm_toolkit.config.finetune_checks import finetune_problems
from plm_toolkit.config.numbers import merge, number_problems
from plm_toolkit.config.overrides import keep_typed_text
from plm_toolkit.config.resolve import ResolvedRun
from plm_toolkit.config.train_checks import checked_run
from plm_toolkit.core.errors import ConfigError
from plm_toolkit.core.names import did_you_mean, key_names


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
