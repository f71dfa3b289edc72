"""``data=default``'s validation text: the bundled WikiText excerpt's valid.txt goes with its train.txt only.

With other ``data.train_files`` (as README's plm-prepare line gives them) and no ``data.validation_files``, the run
has no validation text, and says so in one line: a validation loss on text the user never gave would read as a
figure of their corpus.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from plm_toolkit.core.resources import resource_path

BUNDLED_TRAIN = "corpora/wikitext2/train.txt"
BUNDLED_VALIDATION = "corpora/wikitext2/valid.txt"


def is_bundled(train_files) -> bool:
    files = [str(Path(str(f)).expanduser().resolve()) for f in (train_files or [])]
    return files == [str(Path(resource_path(BUNDLED_TRAIN)).resolve())]


def bundled_validation(train_files) -> list[str]:
    """``${plm_bundled_validation:${.train_files}}``: the bundled valid.txt with the bundled train.txt, else none."""
    return [resource_path(BUNDLED_VALIDATION)] if is_bundled(train_files) else []


def register_bundled_resolver() -> None:
    if not OmegaConf.has_resolver("plm_bundled_validation"):
        OmegaConf.register_new_resolver("plm_bundled_validation", bundled_validation)


def validation_note(data_cfg) -> str | None:
    """The line a data=default run with the user's training files and no validation files logs, else None."""
    if data_cfg.get("name") != "default" or data_cfg.get("store") or data_cfg.validation_files:
        return None
    if is_bundled(data_cfg.train_files):
        return None
    return (
        "no validation text: data.train_files are yours, so the bundled WikiText valid.txt is not used and the run "
        "does not evaluate; give data.validation_files=[FILE,...] to evaluate on your own held-out text"
    )
