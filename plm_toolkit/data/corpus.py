"""Reading documents: local text files or a saved `datasets` folder, checked, fingerprinted, split into sentences.

Text-file format: UTF-8, one document per block, a blank line between documents, each line holding one or more
sentences (usually a paragraph). Everything is read with `datasets`, which memory-maps the text from its cache
so that a corpus larger than memory streams through tokenization.
"""

from __future__ import annotations

import codecs
import hashlib
import os
import re
from dataclasses import dataclass
from enum import Enum
from importlib import resources
from pathlib import Path
from typing import Any

# Nothing in the data pipeline may reach a hub; set before `datasets` is imported (a user's own value wins).
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import datasets  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from plm_toolkit.data.cache import cache_root  # noqa: E402, F401  (its home is data/cache.py)
from plm_toolkit.errors import ConfigError, DataError  # noqa: E402

SPLITS = ("train", "validation")
_CHUNK = 1 << 20  # bytes read at a time while checking a file


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


def choice(value: Any) -> str:
    """The string of a config choice, whether it arrives as a str-Enum (structured config) or a plain str."""
    return value.value if isinstance(value, Enum) else str(value)


def stable_hash(*parts: Any) -> str:
    """A short hex digest of the parts' text, stable across processes and Python runs (unlike hash())."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(repr(part).encode("utf-8"))
        digest.update(b"\x1f")
    return digest.hexdigest()[:24]


# --- sentences --------------------------------------------------------------------------------------------

# A candidate boundary: sentence-final punctuation, optional closing quotes/brackets, whitespace, then what can
# start a sentence (an optional opening quote/bracket before a capital letter or a digit).
_BOUNDARY = re.compile(r"[.!?]+[\"'\u201d\u2019)\]]*\s+(?=[\"'\u201c\u2018(\[]?[A-Z0-9])")
# Words whose final period does not end a sentence (compared lower-cased, without the period).
# fmt: off
ABBREVIATIONS = frozenset({
    "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "mt", "ft", "rev", "hon", "pres",  # titles, places
    "gen", "col", "lt", "sgt", "capt", "cmdr", "adm", "gov", "sen", "rep",  # ranks and offices
    "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec",  # months
    "vs", "etc", "no", "nos", "vol", "fig", "figs", "approx", "dept", "est", "inc", "ltd", "co", "corp",
    "ca", "cf", "al", "op",
})
# fmt: on
# A single initial (`J. Smith`) or a dotted abbreviation (`U.S.`, `e.g.`, `i.e.`, `a.m.`).
_DOTTED = re.compile(r"^(?:[A-Za-z]\.)+$")


def split_sentences(text: str) -> list[str]:
    """Split one line of text into sentences with a regular expression (no model, no nltk).

    A sentence ends at `.`, `!` or `?` (possibly repeated and followed by closing quotes or brackets) when
    whitespace and then a capital letter, a digit or an opening quote follows. A period does not end a sentence
    after a common abbreviation (`Mr.`, `Dr.`, `No.`, `etc.`; see ABBREVIATIONS), a single initial (`J.`) or a
    dotted abbreviation (`U.S.`, `e.g.`). The rule errs towards fewer splits: `in the U.S. He` stays one
    sentence. Sentences keep their punctuation; empty text gives [].
    """
    sentences = []
    start = 0
    for match in _BOUNDARY.finditer(text):
        if match.group().startswith(".") and _is_abbreviation(text[start : match.start() + 1]):
            continue
        sentence = text[start : match.end()].strip()
        if sentence:
            sentences.append(sentence)
        start = match.end()
    rest = text[start:].strip()
    if rest:
        sentences.append(rest)
    return sentences


def _is_abbreviation(before: str) -> bool:
    """Whether the last word of `before` (which ends with its period) is an abbreviation."""
    words = before.split()
    if not words:
        return False
    word = words[-1].lstrip("\"'(\u201c\u2018[")
    return word[:-1].lower() in ABBREVIATIONS or bool(_DOTTED.match(word))


_BLANK_LINES = re.compile(r"\n\s*\n")


def split_documents(block: str) -> list[str]:
    """The documents in one row read from a text file.

    `datasets` splits a file at empty lines only; a line holding nothing but spaces or tabs separates
    documents too, so the row is split again here. Blank documents are dropped.
    """
    return [d.strip() for d in _BLANK_LINES.split(block) if d.strip()]


def document_sentences(text: str) -> list[str]:
    """The sentences of one document, line by line."""
    return [s for line in text.splitlines() for s in split_sentences(line)]


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
    decoder = codecs.getincrementaldecoder("utf-8")()
    line = 1
    has_text = False
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
            nul = chunk.find(b"\x00")
            if nul >= 0:
                where = line + chunk.count(b"\n", 0, nul)
                raise DataError(f"{path}:{where}: NUL byte, this looks like a binary file; expected UTF-8 text")
            try:
                text = decoder.decode(chunk)
            except UnicodeDecodeError as e:
                # The bad byte's offset counts from the undecoded tail carried over from the last chunk.
                pending = len(decoder.getstate()[0])
                where = line + chunk.count(b"\n", 0, max(e.start - pending, 0))
                raise DataError(f"{path}:{where}: not valid UTF-8 ({e.reason}); expected UTF-8 text") from None
            has_text = has_text or bool(text.strip())
            line += chunk.count(b"\n")
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise DataError(f"{path}:{line}: ends inside a UTF-8 character; expected UTF-8 text") from None
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


def split_files(data_cfg: Any, split: str) -> list[str]:
    """The text files of `split` ("train" or "validation")."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    files = data_cfg.train_files if split == "train" else data_cfg.validation_files
    return [str(f) for f in (files or [])]


def read_documents(data_cfg: Any, split: str) -> Documents | None:
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
    # Hashing the contents (not size + mtime) costs one read of each file per run and keeps every cache
    # keyed on what the files say, whoever touched them.
    fingerprint = stable_hash("files", [check_text_file(f) for f in files])
    # datasets keys its own cache on paths and modification times; a folder per contents hash keeps it from
    # serving an old parse of a file that changed but kept its time stamp.
    cache = cache_root(data_cfg) / "datasets" / fingerprint
    try:
        loaded = datasets.load_dataset(
            "text",
            data_files={"train": [str(Path(f).resolve()) for f in files]},
            sample_by="paragraph",  # one row per block of lines between blank lines
            cache_dir=str(cache),
            split="train",
        )
    except Exception as e:  # noqa: BLE001 - any reader failure is a data problem to report in one line
        raise DataError(f"could not read {', '.join(files)}: {str(e).splitlines()[0]}") from e
    return Documents(loaded, fingerprint, ", ".join(files))


def _read_saved(data_cfg: Any, split: str) -> Documents | None:
    path = Path(os.path.expanduser(str(data_cfg.dataset_path)))
    if not path.is_dir():
        raise DataError(f"saved dataset {path} does not exist; expected a folder written by save_to_disk")
    try:
        loaded = datasets.load_from_disk(str(path))
    except Exception as e:  # noqa: BLE001
        raise DataError(f"{path} is not a dataset saved with save_to_disk: {str(e).splitlines()[0]}") from e
    if isinstance(loaded, datasets.DatasetDict):
        names = {"train": ("train",), "validation": ("validation", "valid")}[split]
        found = [n for n in names if n in loaded]
        if not found:
            if split == "train":
                raise DataError(f"saved dataset {path} has no 'train' split; it has {sorted(loaded)}")
            return None
        dataset = loaded[found[0]]
    elif split == "train":
        dataset = loaded
    else:
        return None
    column = data_cfg.text_column
    if column not in dataset.column_names:
        raise DataError(
            f"saved dataset {path} has no column {column!r} (data.text_column); its columns are {dataset.column_names}"
        )
    dataset = dataset.select_columns([column])
    if column != "text":
        dataset = dataset.rename_column(column, "text")
    return Documents(dataset, stable_hash("saved", str(path), dataset._fingerprint), str(path))


def iter_documents(documents: Documents):
    """Every document's text, in corpus order."""
    for batch in documents.dataset.iter(batch_size=1000):
        for block in batch["text"]:
            yield from split_documents(block or "")
