"""A run's length as users of transformers' Trainer give it: ``trainer.max_steps=N`` on plm-finetune's command line
counts the run in steps although the command's own default counts it in epochs (``trainer.epochs=3``), as the
Trainer's ``max_steps`` overrides its ``num_train_epochs``. Both given on the command line stay an error: which one
the user meant cannot be told.
"""

from __future__ import annotations

from collections.abc import Sequence

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig


def command_line_values(overrides: Sequence[str]) -> dict[str, object]:
    """Key -> value of each ``key=value`` override (``+``/``++`` prefixes dropped; a deletion ``~key`` is left out):
    what the user set, as against what the config files and schemas gave."""
    parsed = OverridesParser.create().parse_overrides(list(overrides))
    return {o.key_or_group: o.value() for o in parsed if not o.is_delete()}


def steps_over_epochs(cfg: DictConfig, overrides: Sequence[str]) -> str | None:
    """Set ``trainer.epochs`` to null when the command line (``overrides``: Hydra's ``hydra.overrides.task``) gives
    ``trainer.max_steps`` a number and leaves ``trainer.epochs`` at the config's value. Returns the log line that
    says so, else None (nothing changed)."""
    given = command_line_values(overrides)
    steps = given.get("trainer.max_steps")
    if steps is None or "trainer.epochs" in given or cfg.trainer.epochs is None:
        return None
    epochs = cfg.trainer.epochs
    cfg.trainer.epochs = None
    return (
        f"trainer.max_steps={steps} from the command line sets the run's length: trainer.epochs={epochs:g} "
        "(the default) is set aside, as transformers' max_steps overrides num_train_epochs"
    )
