"""Folders written by ``datasets``' ``save_to_disk`` (``data.dataset_path``), opened split by split. Its own module so
that the readers that cut a corpus into pieces import ``datasets`` only where a saved dataset is read."""

from __future__ import annotations

import os
from pathlib import Path

# Nothing in the data pipeline may reach a hub; set before `datasets` is imported (a user's own value wins).
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import datasets  # noqa: E402

from plm_toolkit.core.errors import DataError  # noqa: E402


def open_saved_split(path: Path, split: str, column: str):
    """(split name, Dataset) of a folder written by save_to_disk, or None when it has no such split (a single Dataset
    is the training split). DataError when the folder or the column is missing."""
    if not path.is_dir():
        raise DataError(f"saved dataset {path} does not exist; expected a folder written by save_to_disk")
    try:
        loaded = datasets.load_from_disk(str(path))
    except Exception as e:  # noqa: BLE001
        raise DataError(f"{path} is not a dataset saved with save_to_disk: {str(e).splitlines()[0]}") from e
    if isinstance(loaded, datasets.DatasetDict):
        names = {"train": ("train",), "validation": ("validation", "valid")}.get(split, (split,))
        found = [n for n in names if n in loaded]
        if not found:
            if split == "train":
                raise DataError(f"saved dataset {path} has no 'train' split; it has {sorted(loaded)}")
            return None
        split, dataset = found[0], loaded[found[0]]
    elif split in ("train", None):
        split, dataset = None, loaded
    else:
        return None
    if column not in dataset.column_names:
        raise DataError(
            f"saved dataset {path} has no column {column!r} (data.text_column); its columns are {dataset.column_names}"
        )
    return split, dataset
