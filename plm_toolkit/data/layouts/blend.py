"""Weighted blends of corpora (``data.sources``): Megatron-LM's ``--data-path 0.7 wiki 0.3 code`` (its
``BlendedDataset``), llm-foundry's streams with proportions.

Each source is prepared into a token store of its own (``data/store/preparation.py``), all with one tokenizer: the one
``data.tokenizer.path`` names, or one trained on a sample of every source's training files. A source's store is
keyed on its own files, so it is tokenized once whatever blend names it: changing a weight or adding a source
re-tokenizes nothing, and a packed layout never packs the text of two sources into one example.

The blend is an endless stream of examples, as the loader expects (``data/batching/loader.py``: the position in the data
is one integer). Position p draws from source ``table[p mod PERIOD]``, a table filled once by Megatron's greedy rule:
each position goes to the source furthest behind its share (``weight * positions - examples drawn``), so after any
number of positions every source's count is within about one example of its share (no sampling noise), and a batch
of 10 with weights 0.6/0.3/0.1 holds 6, 3 and 1. The k-th example drawn from a source is entry k of that source's
own epochs of seeded permutations, so a source smaller than its share repeats (its epochs are counted) and a larger
one is read in part, differently shuffled by every seed. Everything is a pure function of (seed, position): a
resumed run reads exactly what the uninterrupted one reads.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from plm_toolkit.core.cache import stable_hash
from plm_toolkit.data.layouts.order import EpochPermutations, mix_seed
from plm_toolkit.data.layouts.windows import ExampleView

# Positions of one pass of the greedy table; the shares drift from the weights by at most about one example per
# source per period (a relative error below 2e-5).
PERIOD = 1 << 16


def greedy_table(weights: Sequence[float], length: int) -> np.ndarray:
    """The source of each of ``length`` positions (int16): position i goes to the source with the largest error
    ``weight * max(i, 1) - drawn so far`` (Megatron-LM's ``build_blending_indices``), the first on ties."""
    total = float(sum(weights))
    shares = [float(w) / total for w in weights]
    drawn = [0] * len(shares)
    live = [k for k, share in enumerate(shares) if share > 0]  # weight 0 would win the ties when all errors are 0
    table = np.empty(length, np.int16)
    for i in range(length):
        # Rounded: 0.6/0.3/0.1 and 6/3/1 break their ties alike, whatever the floating-point residue.
        source = max(live, key=lambda k: (round(shares[k] * max(i, 1) - drawn[k], 9), -k))
        table[i] = source
        drawn[source] += 1
    return table


class BlendOrder:
    """The loader's order over a blend: flat example index (``offsets[source]`` + the source's own example) at
    stream position p."""

    def __init__(self, blend: BlendedExamples, seed: int, shuffle: bool = True):
        self.blend = blend
        self.permutations = [
            EpochPermutations(len(view), mix_seed(seed, int(stable_hash(name)[:15], 16), stream=4), shuffle)
            for name, view in zip(blend.names, blend.views, strict=True)
        ]

    def __call__(self, position: int) -> int:
        source, k = self.blend.draw(position)
        return int(self.blend.offsets[source]) + self.permutations[source](k)


class ConcatenatedExamples(ExampleView):
    """Several example views one after the other (each source's own examples, flat index = offset + own index)."""

    def __init__(self, names: Sequence[str], views: Sequence):
        self.names, self.views = list(names), list(views)
        self.offsets = np.concatenate([[0], np.cumsum([len(v) for v in self.views])]).astype(np.int64)
        self.column_names = list(self.views[0].column_names)

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def source_of(self, index: int) -> int:
        return int(np.searchsorted(self.offsets, index, side="right")) - 1

    def rows(self, indices: Sequence[int]) -> list[dict]:
        out: list[dict | None] = [None] * len(indices)
        wanted: dict[int, list[tuple[int, int]]] = {}
        for at, index in enumerate(indices):
            source = self.source_of(int(index))
            wanted.setdefault(source, []).append((at, int(index) - int(self.offsets[source])))
        for source, places in wanted.items():  # one read per source
            for (at, _), row in zip(places, self.views[source].rows([k for _, k in places]), strict=True):
                out[at] = row
        return out  # type: ignore[return-value]

    def row(self, index: int) -> dict:
        return self.rows([index])[0]

    def lengths(self) -> list[int]:
        out: list[int] = []
        for view in self.views:
            out += view.lengths() if hasattr(view, "lengths") else [len(r["input_ids"]) for r in view]
        return out


class BlendedExamples(ConcatenatedExamples):
    """The training examples of a blend: every source's examples (``len`` is their total, what trainer.epochs
    counts), read in the blend's order (``order``) rather than in a permutation of them all."""

    def __init__(self, names: Sequence[str], views: Sequence, weights: Sequence[float]):
        super().__init__(names, views)
        self.weights = np.asarray(weights, np.float64) / float(np.sum(weights))
        self.table = greedy_table(self.weights, PERIOD)
        self.per_period = np.bincount(self.table, minlength=len(self.views)).astype(np.int64)
        # Each table entry's rank among the entries of its source before it.
        self.rank = np.empty(PERIOD, np.int64)
        for source in range(len(self.views)):
            where = np.flatnonzero(self.table == source)
            self.rank[where] = np.arange(len(where))

    def blend_order(self, seed: int, shuffle: bool = True) -> BlendOrder:
        return BlendOrder(self, seed, shuffle)

    def draw(self, position: int) -> tuple[int, int]:
        """(source, k) of stream position ``position``: it reads the k-th example drawn from that source."""
        period, offset = divmod(int(position), PERIOD)
        source = int(self.table[offset])
        return source, period * int(self.per_period[source]) + int(self.rank[offset])

    def drawn(self, positions: int) -> np.ndarray:
        """Examples drawn from each source by stream positions [0, positions)."""
        period, offset = divmod(int(positions), PERIOD)
        return period * self.per_period + np.bincount(self.table[:offset], minlength=len(self.views))

    def realized(self, positions: int) -> dict[str, float]:
        """Metrics of the first ``positions`` examples read: each source's share (``blend_share/<name>``) and the
        passes over its examples (``blend_epochs/<name>``)."""
        counts = self.drawn(positions)
        total = max(int(counts.sum()), 1)
        out = {}
        for name, view, count in zip(self.names, self.views, counts, strict=True):
            out[f"blend_share/{name}"] = int(count) / total
            out[f"blend_epochs/{name}"] = int(count) / len(view)
        return out

    def describe(self, positions: int | None = None) -> str:
        """One line: every source's weight, examples and (after ``positions`` examples) realized share and epochs."""
        parts = []
        for k, (name, view) in enumerate(zip(self.names, self.views, strict=True)):
            text = f"{name} weight {self.weights[k]:.2%} of {len(view)} examples"
            if positions is not None:
                numbers = self.realized(positions)
                share, epochs = numbers[f"blend_share/{name}"], numbers[f"blend_epochs/{name}"]
                text += f": read {share:.2%} of the examples, {epochs:.3g} epochs"
            parts.append(text)
        return "; ".join(parts)


class SourceValidation(ConcatenatedExamples):
    """The validation examples of a blend: all sources' together (the overall eval_loss), with ``sources`` (name
    -> examples) scored one by one too (``eval_loss/<name>``)."""

    @property
    def sources(self) -> dict:
        return dict(zip(self.names, self.views, strict=True))
