"""A given ``data.store`` against the run's own corpus keys: a finished store is what the run trains on, so files
that the run names and the store was not prepared from would be ignored silently, and validation files that the
store lacks would evaluate nothing. Both are refused, naming the file and the two ways out. The bundled corpus of
``data=default`` counts as not given (``plm-train model=gpt2 data.store=PATH`` is how a store is read).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from plm_toolkit.core.errors import DataError
from plm_toolkit.core.resources import resource_path

_BUNDLED = {"train": "corpora/wikitext2/train.txt", "validation": "corpora/wikitext2/valid.txt"}
# The corpus key of each split.
KEYS = {"train": "train_files", "validation": "validation_files"}
# The way out for a run whose settings or files a finished data.store does not serve: plm-prepare refuses that
# folder the same way, so a store for the run goes to another one.
ANOTHER_STORE = "prepare a store for this run in another folder (plm-prepare with its overrides and a new data.store)"


def given_entries(data_cfg: Any, split: str) -> list[str]:
    """The entries of data.train_files / data.validation_files, or [] where they are the bundled corpus's."""
    entries = [str(e) for e in (getattr(data_cfg, KEYS[split], None) or [])]
    if entries == [resource_path(_BUNDLED[split])]:
        return []
    return entries


def check_store_sources(folder: Path, manifest: dict, data_cfg: Any, resolve) -> None:
    """DataError where the run's given files (``resolve(data_cfg, split)``: their sources) are not the ones the
    finished store at ``folder`` was prepared from, or name validation files the store has no split for."""
    if getattr(data_cfg, "dataset_path", None):
        return
    for split, key in KEYS.items():
        entries = given_entries(data_cfg, split)
        if not entries:
            continue
        info = manifest["splits"].get(split)
        if info is None:
            raise DataError(
                f"data.{key}={_shown(entries)}: data.store={folder} has no {split} split (plm-prepare was given no "
                f"data.{key}), so these files would be ignored; drop data.{key}, or {ANOTHER_STORE}"
            )
        held = [os.path.abspath(r["path"]) for r in info.get("sources", [])]
        wanted = [os.path.abspath(s.path) for s in resolve(data_cfg, split) or []]
        if wanted != held:
            extra = [p for p in wanted if p not in held]
            what = (
                f"names {extra[0]}, which data.store={folder} was not prepared from"
                if extra
                else f"does not list the files of data.store={folder} as plm-prepare was given them"
            )
            raise DataError(
                f"data.{key} {what} (it holds {_shown(held)}); the run trains on the store: drop data.{key}, or "
                f"{ANOTHER_STORE}"
            )


def _shown(paths: list[str], most: int = 3) -> str:
    shown = ", ".join(paths[:most])
    return f"[{shown}{', ...' if len(paths) > most else ''}]"
