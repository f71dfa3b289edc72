"""Files shipped inside the package (the bundled corpora, configs): their absolute path, and the resolver
``${plm_resource:relative/path}`` through which presets name them."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from omegaconf import OmegaConf


def register_resolvers() -> None:
    """Register `${plm_resource:relative/path}`: the absolute path of a file shipped inside the package.

    Config presets name the bundled corpus this way so that they work wherever the package is installed and
    whatever the working directory. Calling it again is harmless.
    """
    if not OmegaConf.has_resolver("plm_resource"):
        OmegaConf.register_new_resolver("plm_resource", resource_path)


def resource_path(relative: str) -> str:
    """Absolute path of `relative` inside the installed plm_toolkit package."""
    return str(Path(str(resources.files("plm_toolkit").joinpath(relative))).resolve())
