"""Corpora, tokenizers, example building and batching for pretraining.

    data = prepare_pretraining_data(cfg.data, layout="sentence_pairs", seed=cfg.trainer.seed)
    loader = DataLoader(data.train, collate_fn=Collator(data.vocab), ...)

The `${plm_resource:...}` resolver that the data presets use is registered by `plm_toolkit.config.setup()`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Names this package offers, and the module each comes from: imported on first use, so that a worker process that
# only tokenizes (``data/shard_worker.py``) does not import torch or datasets with the package.
_EXPORTS = {
    "Collator": "collate",
    "Documents": "corpus",
    "read_documents": "corpus",
    "register_resolvers": "corpus",
    "resource_path": "corpus",
    "split_sentences": "corpus",
    "LAYOUT_BUILDERS": "plan",
    "LAYOUTS": "plan",
    "DataPlan": "plan",
    "register_layout": "plan",
    "build_pretraining_examples": "pretraining",
    "pack_full_sentences": "pretraining",
    "SPECIAL_TOKENS": "tokenizer",
    "load_or_train_tokenizer": "tokenizer",
    "load_tokenizer": "tokenizer",
    "save_tokenizer": "tokenizer",
    "vocab_from_tokenizer": "tokenizer",
    "Vocab": "vocab",
    "PretrainingData": "examples",
    "prepare_pretraining_data": "examples",
}

if TYPE_CHECKING:
    from plm_toolkit.data.examples import PretrainingData, prepare_pretraining_data  # noqa: F401


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "LAYOUTS",
    "SPECIAL_TOKENS",
    "Collator",
    "DataPlan",
    "Documents",
    "PretrainingData",
    "Vocab",
    "build_pretraining_examples",
    "load_or_train_tokenizer",
    "load_tokenizer",
    "pack_full_sentences",
    "prepare_pretraining_data",
    "register_layout",
    "read_documents",
    "register_resolvers",
    "resource_path",
    "save_tokenizer",
    "split_sentences",
    "vocab_from_tokenizer",
]
