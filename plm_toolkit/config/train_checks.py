"""Every impossible setting of a composed plm-train config (plm-prepare composes the same), one message each, in the
order ``checked_run`` composes them; ``config/validate.py`` joins them into one line, as it does plm-finetune's
(``config/finetune_checks.py``)."""

from __future__ import annotations

from omegaconf import DictConfig

from plm_toolkit.config.blends import blend_problems
from plm_toolkit.config.checks import hardware_problems, kernel_problems, training_problems
from plm_toolkit.config.data_checks import data_problems
from plm_toolkit.config.pairing import (
    layout_problems,
    own_check_problems,
    pairing_problems,
    recipe_problems,
    unpad_problems,
)
from plm_toolkit.config.resolve import ResolvedRun, model_class, resolve_run
from plm_toolkit.core.errors import ConfigError
from plm_toolkit.core.registry import MODELS, OBJECTIVES


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
    out += layout_problems(cfg, resolved) + unpad_problems(cfg)
    out += model_class(m.name).run_problems(cfg)
    out += data_problems(cfg) + blend_problems(cfg, resolved.plan if resolved else None)
    out += training_problems(cfg.trainer, cfg.optimizer) + hardware_problems(cfg.hardware)
    out += kernel_problems(cfg.optimizer, cfg.hardware)
    return out, resolved


def problems(cfg: DictConfig, derive_plan: bool = True) -> list[str]:
    """Every impossible setting of a plm-train config, one message each (``checked_run``)."""
    return checked_run(cfg, derive_plan)[0]
