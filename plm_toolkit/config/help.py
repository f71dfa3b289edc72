"""``plm-train --help`` and ``plm-finetune --help``: the config groups each command reads.

Hydra's own listing shows every group on the search path, which includes the other command's groups (``task`` for
plm-train) and the typed schemas (``schema/*``) that presets extend; the help template asks this resolver instead.
"""

from __future__ import annotations

import string
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
    list_groups_only_when_shown()


def list_groups_only_when_shown() -> None:
    """Make Hydra's help skip the group listings a template does not show. Hydra 1.3 builds both
    (``$APP_CONFIG_GROUPS``, ``$HYDRA_CONFIG_GROUPS``) for every help text, each option list from a fresh deep copy
    of the whole config repository: 4 of the 6 seconds ``plm-train --help`` took. Our templates list their groups
    through ``plm_config_groups``; ``--hydra-help``'s template still gets Hydra's lists."""
    from hydra._internal.hydra import Hydra

    original = Hydra.get_help
    if getattr(original, "plm_lazy", False):
        return

    def get_help(self, help_cfg, cfg, args_parser, resolve):
        if "CONFIG_GROUPS" in help_cfg.template:
            return original(self, help_cfg, cfg, args_parser, resolve)
        fields = {"FLAGS_HELP": self.format_args_help(args_parser), "CONFIG": OmegaConf.to_yaml(cfg, resolve=resolve)}
        return string.Template(help_cfg.template).safe_substitute(fields)

    get_help.plm_lazy = True
    Hydra.get_help = get_help
