"""The check of a model config read from a checkpoint file (plm-train's config.yaml, a Hugging Face config.json):
the same types and ranges ``plm-train`` enforces on its own config, so that a bad value is named against the file
instead of surfacing as a torch error from inside a constructor."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from plm_toolkit.config.validate import model_field_problems
from plm_toolkit.core.errors import CheckpointError


def check_model_config(config: Any, path: Path) -> Any:
    """``config`` (a family's model config read from the checkpoint file ``path``), once every field has its
    declared type and every size, count, dropout and epsilon is in range, as ``plm-train`` checks its own config
    (a negative width would otherwise surface as a torch error from deep inside a constructor)."""
    try:
        OmegaConf.structured(config)
    except OmegaConfBaseException as err:
        detail = " ".join(str(err).split("\n")[0].split())
        raise CheckpointError(f"{path}: {getattr(err, 'full_key', '') or 'model config'}: {detail}") from None
    problems = model_field_problems(dataclasses.asdict(config))
    if problems:
        raise CheckpointError(f"{path}: {'; '.join(problems)}")
    return config
