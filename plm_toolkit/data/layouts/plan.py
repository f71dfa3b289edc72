"""What the data side needs to know from an objective, in one place: the objective's data plan.

The objective returns it (``Objective.data_plan``) from its config, the data config and the model config, before
anything is built: validation reads its layout, train.py builds the examples from it, and the loop reads batches
in its order through its transform. A new kind of data (parallel text for translation) is a new layout: the
objective's module registers its example builder with ``@register_layout("parallel_text")``, and nothing else
changes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from plm_toolkit.core.errors import ConfigError

# A batch transform: (collated CPU batch, one seed per row) -> batch. All randomness of row i comes from seeds[i]
# and is drawn over the row's unpadded length, so the result does not depend on how rows are grouped into
# micro-batches or processes, nor on how much padding a batch has. A transform whose ``takes_step`` attribute is
# true changes with training (ERNIE's masking stages): training calls it with the optimizer step as a third
# argument (data/batching/loader.py), evaluation without.
BatchTransform = Callable[[dict[str, torch.Tensor], Sequence[int]], dict[str, torch.Tensor]]

# sentence_pairs: BERT's, B random half the time (NSP); segment_pairs: two consecutive segments of one document,
# in order (SOP swaps them per batch); full_sentences: RoBERTa's packing; streams: windows of one token stream;
# parallel: source-target sentence pairs (data=parallel, data/layouts/translation_pairs.py), read in token-count batches.
# sentence_streams: ELMo's, windows of a stream of <S> ... </S> sentences and of the same sentences reversed.
LAYOUTS = ("sentence_pairs", "segment_pairs", "full_sentences", "streams", "parallel", "sentence_streams")
STREAM_LAYOUTS = ("streams", "sentence_streams")
# shuffled: a seeded permutation of the examples per epoch; stream: consecutive windows dealt out in order over
# batch_size sub-streams, so that a carried memory continues each row's text (Transformer-XL section 3.2).
ORDERS = ("shuffled", "stream")
# Layouts that objective modules add for their own kind of data: name -> builder(data_cfg, tokenizer, vocab, plan,
# split, seed) returning the split's examples (a datasets.Dataset or a list of dicts), or None without that split.
LAYOUT_BUILDERS: dict[str, Callable[..., Any]] = {}
_LAYOUT_WORDS = {
    "sentence_pairs": "sentence pairs",
    "segment_pairs": "in-order segment pairs",
    "streams": "streams",
    "sentence_streams": "sentence streams",
    "full_sentences": "full sentences or pairs",
    "parallel": "sentence pairs (data=parallel)",
}


@dataclass(frozen=True)
class DataPlan:
    # How examples are cut from the corpus (LAYOUTS).
    layout: str = "full_sentences"
    # Stream layouts: tokens per window and the distance between consecutive window starts.
    window: int | None = None
    stride: int | None = None
    # How the loader reads the examples (ORDERS).
    order: str = "shuffled"
    # 0: the batch transform draws afresh for every batch (dynamic masking). N > 0: each example gets N fixed
    # draws, used in turn epoch after epoch (BERT's static masking with dupe_factor N).
    static_copies: int = 0
    # stream order: the second half of every batch reads its sub-streams backwards (XLNet's bi_data).
    backward_half: bool = False
    # Runs on the CPU in the data-loader workers (masking, swaps, permutation sampling); None: batches as collated.
    transform: BatchTransform | None = None
    # Where knowledge units come from (an objective config that data/units/corpus.py reads), or None. With them the
    # corpus is tokenized with a join code per token and full-sentences examples carry a ``units`` column.
    units: Any = None
    # Whether examples carry, beside their ids, the spelling of every token the vocabulary maps to unk
    # (data/tokenization/spellings.py): for a backbone that reads characters, which must read such a word as written.
    spellings: bool = False

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise ValueError(f"order must be one of {ORDERS}, got {self.order!r}")

    @property
    def streams(self) -> bool:
        """Whether the loader deals the examples out in stream order."""
        return self.order == "stream"

    @property
    def stream_window(self) -> tuple[int, int] | None:
        return (self.window, self.stride) if self.layout in STREAM_LAYOUTS else None

    def with_transform(self, transform: BatchTransform | None) -> DataPlan:
        return dataclasses.replace(self, transform=transform)


def register_layout(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: ``@register_layout("parallel_text")`` over an example builder (see ``LAYOUT_BUILDERS``)."""

    def wrap(builder: Callable[..., Any]) -> Callable[..., Any]:
        if name in LAYOUTS or name in LAYOUT_BUILDERS:
            raise ValueError(f"layout {name!r} exists already")
        LAYOUT_BUILDERS[name] = builder
        return builder

    return wrap


def choose_layout(data_cfg, wanted: str, objective: str) -> str:
    """``data.packing`` resolved against the layout an objective wants: ``auto`` takes it; a full-sentences
    objective (MLM) also reads pairs; anything else must be the wanted layout, or ConfigError names the fix."""
    packing = getattr(data_cfg.packing, "value", data_cfg.packing)
    if packing == "auto":
        return wanted
    if packing == wanted or (wanted == "full_sentences" and packing not in STREAM_LAYOUTS):
        return packing
    raise ConfigError(
        f"data.packing={packing}: objective={objective} needs {_LAYOUT_WORDS.get(wanted, wanted)}; "
        "set data.packing=auto"
    )
