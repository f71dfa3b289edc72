"""The range check that every number of every command's config passes, whatever the key means.

Each key's own check (``checks.py``, ``validate.py``, a family's or objective's ``check_config``) knows its domain:
a probability, a positive size. This pass catches what no key can mean and what an unchecked key would carry into
the computation: NaN and infinities (``temperature=nan`` sampled from NaN probabilities), subnormal floats (below
2.2e-308: they have lost their precision, and dividing by one overflows: ``temperature=1e-310`` made every logit
infinite), and integers that do not fit 64 bits (torch's "Overflow when unpacking long long" traceback). Messages
for a key that its own check already names are left out (``merge``): the more precise one wins.
"""

from __future__ import annotations

import math
import sys

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

INT64 = 2**63 - 1
SMALLEST_NORMAL = sys.float_info.min


def number_problem(key: str, value) -> str | None:
    """Why ``value`` can be no setting at all, or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        if not math.isfinite(value):
            return f"{key}={value}: expected a finite number"
        if 0.0 < abs(value) < SMALLEST_NORMAL:
            return (
                f"{key}={value!r}: a subnormal number (smaller than {SMALLEST_NORMAL:.1e}), which has lost its "
                "precision and overflows when divided by; expected 0 or a normal number"
            )
    elif isinstance(value, int) and not -INT64 - 1 <= value <= INT64:
        return f"{key}={value}: does not fit in 64 bits; expected an integer from -2^63 to 2^63 - 1"
    return None


def number_problems(cfg: DictConfig | ListConfig, prefix: str = "") -> dict[str, str]:
    """Key -> message for every number under ``cfg`` that no key can mean (missing values and interpolations that
    do not resolve are left to the checks that read them)."""
    out: dict[str, str] = {}
    keys = range(len(cfg)) if isinstance(cfg, ListConfig) else list(cfg.keys())
    for key in keys:
        name = f"{prefix}[{key}]" if isinstance(cfg, ListConfig) else f"{prefix}{'.' if prefix else ''}{key}"
        try:
            if OmegaConf.is_missing(cfg, key):
                continue
            value = cfg[key]
        except OmegaConfBaseException:
            continue
        if isinstance(value, (DictConfig, ListConfig)):
            out.update(number_problems(value, name))
        else:
            problem = number_problem(name, value)
            if problem:
                out[name] = problem
    return out


def merge(specific: list[str], generic: dict[str, str]) -> list[str]:
    """The keys' own messages, then this pass's for the keys none of them names."""
    named = " ".join(specific)
    return specific + [message for key, message in generic.items() if f"{key}=" not in named]
