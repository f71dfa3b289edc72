"""Fill the registries: import every module of the packages whose modules register something.

Models, Hugging Face adapters, objectives and tasks register themselves when their module is imported
(``@MODELS.register(...)``). This function imports them all, so a new family, adapter, objective or task is a new
file and nothing else lists it. It lives outside ``registry.py`` so that the registry imports none of the modules
that import it.
"""

from __future__ import annotations

import importlib
import pkgutil

# In import order, the lower floors first: an adapter (interop/) imports its family and objective modules.
PACKAGES = ("plm_toolkit.models", "plm_toolkit.objectives", "plm_toolkit.interop", "plm_toolkit.tasks")


def load_all() -> None:
    """Import every module of ``PACKAGES`` (a no-op for modules already imported)."""
    for name in PACKAGES:
        package = importlib.import_module(name)
        for module in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{name}.{module.name}")
