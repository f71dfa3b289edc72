"""What keys a token store: every setting that changes what it holds (``store_settings``, hashed into the cache's
folder name and kept in the manifest), and the check that a finished store serves a run (``check_settings``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import tokenizers

from plm_toolkit.core.cache import stable_hash
from plm_toolkit.core.errors import DataError
from plm_toolkit.data.sources.corpus import document_boundary
from plm_toolkit.data.store.given import ANOTHER_STORE
from plm_toolkit.data.store.side_channels import SideChannel, side_channel
from plm_toolkit.data.tokenization.tokenizer import TRAINING_VERSION, load_tokenizer, lowercase_setting, tokenizer_kind

if TYPE_CHECKING:
    from plm_toolkit.core.data_schema import DataConfig

STORE_VERSION = 1
# Bump when data/sources/documents.py splits sentences differently: stores of sentences are prepared again.
SENTENCE_RULES = 2
# The units the store tokenizes itself (data/store/shard_worker.py, data/store/translation_pairs.py); any other is a
# side channel's (data/store/side_channels.py).
OWN_UNITS = ("documents", "document_sentences", "sentences", "pairs")


def channel_of(unit: str) -> SideChannel | None:
    """The side channel of ``unit``, None for the store's own units; ValueError for a unit nobody registered."""
    if unit in OWN_UNITS:
        return None
    channel = side_channel(unit)
    if channel is None:
        raise ValueError(
            f"the token store has no unit {unit!r}: its own are {', '.join(OWN_UNITS)}, and a package that adds one "
            "registers it when imported (data/store/side_channels.py; plm_toolkit.data.units registers 'units')"
        )
    return channel


# The versions of the code that trains a tokenizer: they key the cache (a newer one trains again), but a finished
# data.store serves a run whatever trained its tokenizer.
CODE_VERSIONS = ("tokenizers", "training")


def tokenizer_settings(data_cfg: DataConfig) -> dict:
    """What decides the tokenizer: the loaded file's contents, or every training setting."""
    t = data_cfg.tokenizer
    if t.path:
        loaded = load_tokenizer(t.path, lowercase=t.lowercase is None or bool(t.lowercase))
        return {"path": str(t.path), "contents": stable_hash(loaded.to_str())}
    return {
        "kind": tokenizer_kind(data_cfg),
        "vocab_size": int(t.vocab_size),
        "lowercase": lowercase_setting(data_cfg),
        "min_frequency": int(t.min_frequency),
        "train_sample_bytes": int(t.train_sample_bytes),
        "tokenizers": tokenizers.__version__,
        "training": TRAINING_VERSION,
    }


def store_settings(data_cfg: DataConfig, unit: str, spellings: bool, units: Any = None) -> dict:
    """Every setting that changes what a store holds (``units``: where a side channel's unit finds its codes, kept
    under the unit's name: ERNIE's knowledge units, ``data/units/store.py``)."""
    channel = channel_of(unit)
    settings = {
        "version": STORE_VERSION,
        "unit": unit,
        "spellings": bool(spellings),
        "document_boundary": document_boundary(data_cfg),
        "text_column": str(data_cfg.text_column),
        "tokenizer": tokenizer_settings(data_cfg),
    }
    # Where sentences end (data/sources/chinese.py); a side channel codes sentences one by one.
    if unit in ("document_sentences", "sentences") or channel is not None:
        settings["sentence_rules"] = SENTENCE_RULES
    if channel is not None:
        settings[unit] = channel.settings(units)
    return settings


_WORDS = {
    "unit": {
        "documents": "documents tokenized whole, as written (streams)",
        "document_sentences": "documents tokenized whole with their sentence starts (streams and full sentences)",
        "sentences": "sentences tokenized one by one (sentence pairs and sentence streams)",
        "pairs": "sentence pairs for translation",
    },
    "sentence_rules": {None: "sentences split by English rules only", 2: "sentences split at Chinese 。！？ too"},
}


# Settings of a store that are data.* keys of the run.
_DATA_KEYS = ("document_boundary", "text_column", "source_lang", "target_lang")


def _described(key: str, value: Any) -> str:
    """A setting's value in words."""
    channel = side_channel(value) if key == "unit" and value not in _WORDS["unit"] else None
    if channel is not None:
        return channel.description
    name = f"data.{key}" if key in _DATA_KEYS else key
    return _WORDS.get(key, {}).get(value, f"{name}={value}")


def check_settings(stored: dict, wanted: dict, folder: Path) -> None:
    """DataError naming the first setting in which a finished store differs from what the run needs (a store with
    sentence starts serves streams too; one with spellings serves a run without)."""
    for key, value in sorted(wanted.items(), key=lambda item: item[0] != "unit"):  # what it holds, first
        have = stored.get(key)
        if key == "unit" and have == "document_sentences" and value == "documents":
            continue
        if key == "spellings" and have and not value:
            continue
        if key == "tokenizer":
            if set(have) != set(value):
                raise DataError(
                    f"data.store={folder} was prepared with a {'trained' if 'kind' in have else 'given'} tokenizer, "
                    f"this run asks for a {'trained' if 'kind' in value else 'given'} one (data.tokenizer.path): give "
                    "plm-train the data overrides plm-prepare had"
                )
            for name, setting in value.items():
                if name in CODE_VERSIONS:  # the store holds its tokenizer, whichever code trained it
                    continue
                if have.get(name) != setting:
                    shown = "the tokenizer file's contents" if name == "contents" else f"data.tokenizer.{name}"
                    raise DataError(
                        f"data.store={folder} was prepared with {shown}={have.get(name)}, this run asks for "
                        f"{setting}: {ANOTHER_STORE}, or leave data.store unset"
                    )
            continue
        if key == wanted["unit"] and have != value:  # the settings of the store's side channel
            raise DataError(
                f"data.store={folder} {channel_of(key).difference(have, value)}: {ANOTHER_STORE}, or leave "
                "data.store unset"
            )
        if have != value:
            raise DataError(
                f"data.store={folder} holds {_described(key, have)}; this run needs {_described(key, value)}: "
                f"{ANOTHER_STORE}, or leave data.store unset"
            )


def setting_difference(have: dict, wanted: dict) -> str:
    """The first setting of a store's ``have`` that differs from ``wanted``, with both values, in the run's keys:
    ``data.tokenizer.vocab_size=300, where this run asks for 320``."""
    for key in sorted(set(have) | set(wanted), key=lambda item: item != "unit"):  # what it holds, first
        old, new = have.get(key), wanted.get(key)
        if old == new:
            continue
        if key == "tokenizer" and isinstance(old, dict) and isinstance(new, dict):
            if set(old) != set(new):
                kind = lambda tokenizer: "trained" if "kind" in tokenizer else "given"  # noqa: E731
                return f"a {kind(old)} tokenizer, where this run asks for a {kind(new)} one (data.tokenizer.path)"
            name = next(name for name in new if old.get(name) != new[name])
            if name == "contents":
                return f"another tokenizer file than this run's data.tokenizer.path={new.get('path')}"
            return f"data.tokenizer.{name}={old.get(name)}, where this run asks for {new[name]}"
        return f"{_described(key, old)}, where this run needs {_described(key, new)}"
    return "the same settings"
