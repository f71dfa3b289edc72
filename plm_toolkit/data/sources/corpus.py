"""Reading documents: local text files or a saved `datasets` folder, checked, fingerprinted, split into sentences.

Text-file format: UTF-8, one document per block, a blank line between documents, each line holding one or more
sentences (usually a paragraph). Everything is read with `datasets`, which memory-maps the text from its cache
so that a corpus larger than memory streams through tokenization.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

# Nothing in the data pipeline may reach a hub; set before `datasets` is imported (a user's own value wins).
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import datasets  # noqa: E402

from plm_toolkit.core.cache import cache_root, stable_hash  # noqa: E402
from plm_toolkit.core.choices import choice  # noqa: E402
from plm_toolkit.core.errors import ConfigError, DataError  # noqa: E402
from plm_toolkit.data.sources.documents import (  # noqa: E402
    iter_split,
    split_text,
)
from plm_toolkit.data.sources.pieces import scan_text  # noqa: E402
from plm_toolkit.data.sources.saved_datasets import open_saved_split  # noqa: E402

if TYPE_CHECKING:
    from plm_toolkit.core.data_schema import DataConfig

SPLITS = ("train", "validation")
# Bump when a change to how files are cut into documents changes what the cached documents hold.
READER_VERSION = 2
_CHUNK = 1 << 20  # bytes read at a time while checking a file


def document_boundary(data_cfg: DataConfig) -> str:
    """data.document_boundary (blank_line where a hand-built config has none)."""
    return choice(getattr(data_cfg, "document_boundary", "blank_line"))


# --- files ------------------------------------------------------------------------------------------------


def check_text_file(path: str | Path, expected: str = "documents separated by blank lines") -> str:
    """Check that `path` is non-empty UTF-8 text and return the sha256 of its bytes.

    Reads the file once in 1 MiB chunks; raises DataError naming the file (and the line) when it is missing,
    holds a NUL byte (a binary file), does not decode as UTF-8, or has no non-blank text.
    """
    path = Path(path)
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "does not exist"
        raise DataError(f"corpus file {path} {what}; expected a UTF-8 text file")
    digest = hashlib.sha256()
    with path.open("rb") as f:
        has_text = scan_text(f, path, digest=digest)
    if not has_text:
        raise DataError(f"corpus file {path} has no text; expected {expected}")
    return digest.hexdigest()


@dataclass(frozen=True)
class Documents:
    """One split of a corpus: a Dataset with a "text" column, one document per row."""

    dataset: datasets.Dataset
    # Identifies the source's contents (a hash of the files' bytes or the saved dataset's fingerprint).
    fingerprint: str
    # The files or folder, for messages.
    source: str


def split_files(data_cfg: DataConfig, split: str) -> list[str]:
    """The text files of `split` ("train" or "validation")."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    files = data_cfg.train_files if split == "train" else data_cfg.validation_files
    return [str(f) for f in (files or [])]


def read_documents(data_cfg: DataConfig, split: str) -> Documents | None:
    """The documents of `split`, or None when that split has no source (no validation files: no evaluation)."""
    if data_cfg.dataset_path:
        return _read_saved(data_cfg, split)
    files = split_files(data_cfg, split)
    if not files:
        if split == "train":
            raise ConfigError(
                "data.train_files is empty; give data.train_files=[a.txt,...] or data.dataset_path=<folder>"
            )
        return None
    boundary = document_boundary(data_cfg)
    # Hashing the contents (not size + mtime) costs one read of each file per run and keeps every cache
    # keyed on what the files say, whoever touched them.
    fingerprint = stable_hash("files", [check_text_file(f) for f in files], boundary, READER_VERSION)

    def generate():
        for name in files:
            with open(name, encoding="utf-8") as f:  # universal newlines, as Python reads text
                for document in split_text(f.read(), boundary):
                    yield {"text": document}

    return Documents(_dataset(generate, data_cfg, fingerprint, files), fingerprint, ", ".join(files))


def _dataset(generate, data_cfg: DataConfig, fingerprint: str, sources: list[str]) -> datasets.Dataset:
    """The documents ``generate`` yields as a Dataset, cached under its contents' fingerprint."""
    try:
        return datasets.Dataset.from_generator(
            generate,
            features=datasets.Features({"text": datasets.Value("string")}),
            cache_dir=str(cache_root(data_cfg) / "datasets" / fingerprint),
            fingerprint=fingerprint,
        )
    except Exception as e:  # noqa: BLE001 - any reader failure is a data problem to report in one line
        raise DataError(f"could not read {', '.join(sources)}: {str(e).splitlines()[0]}") from e


def _read_saved(data_cfg: DataConfig, split: str) -> Documents | None:
    path = Path(os.path.expanduser(str(data_cfg.dataset_path)))
    found = open_saved_split(path, split, data_cfg.text_column)
    if found is None:
        return None
    dataset, column = found[1], data_cfg.text_column
    boundary = document_boundary(data_cfg)
    fingerprint = stable_hash("saved", str(path), dataset._fingerprint, column, boundary, READER_VERSION)

    def generate():
        for batch in dataset.select_columns([column]).iter(batch_size=1000):
            for document in iter_split(batch[column], boundary):
                yield {"text": document}

    return Documents(_dataset(generate, data_cfg, fingerprint, [str(path)]), fingerprint, str(path))


def iter_documents(documents: Documents):
    """Every document's text as written, in corpus order."""
    for batch in documents.dataset.iter(batch_size=1000):
        yield from batch["text"]
