"""``plm-train --help`` and ``plm-finetune --help``: the config groups each command reads.

Hydra's own listing shows every group on the search path, which includes the other command's groups (``task`` for
plm-train) and the typed schemas (``schema/*``) that presets extend; the help template asks this resolver instead.
"""

from __future__ import annotations

from importlib import resources

from omegaconf import OmegaConf


def group_options(group: str) -> list[str]:
    """The option names of a config group: the YAML files in ``configs/<group>/``."""
    folder = resources.files("plm_toolkit.configs").joinpath(group)
    return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))


def config_groups(*groups: str) -> str:
    """One line per group: ``group: option, option, ...``."""
    return "\n".join(f"{group}: {', '.join(group_options(group))}" for group in groups)


def register_help_resolver() -> None:
    if not OmegaConf.has_resolver("plm_config_groups"):
        OmegaConf.register_new_resolver("plm_config_groups", config_groups)
