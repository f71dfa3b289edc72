"""Examples cut from a token store on the fly (``data/store/token_store.py``): nothing is loaded, the store stays memory-mapped,
and example k is computed when the loader asks for it.

- ``StreamWindows``: the corpus as one token stream, each document followed by the document separator (GPT-2's
  end-of-text, else [SEP]), cut into windows of ``length`` tokens starting every ``stride`` tokens (GPT, GPT-2,
  Transformer-XL, XLNet, T5's span-corruption inputs);
- ``SentenceStreamWindows``: ELMo's stream of ``<S> sentence </S>`` and its mirror with every sentence reversed,
  both cut into the same windows, with the spellings of each window's unk tokens;
- full-sentence blocks and sentence pairs are in ``data/layouts/packed.py``; they need an index written once.

Every view offers what the loader reads (``data/batching/loader.py``): ``len()``, ``rows(indices)`` (a list of dicts), and,
like a ``datasets.Dataset``, ``view[k]``, ``view[column]``, ``column_names`` and iteration.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from plm_toolkit.core.errors import DataError
from plm_toolkit.data.store.token_store import Shard, StoreSplit
from plm_toolkit.data.tokenization.spellings import spellings_key


class ExampleView:
    """The datasets-like surface over ``row(k)``; subclasses give ``column_names``, ``__len__`` and ``row``."""

    column_names: list[str]

    def __len__(self) -> int:
        raise NotImplementedError

    def row(self, index: int) -> dict:
        raise NotImplementedError

    def rows(self, indices: Sequence[int]) -> list[dict]:
        return [self.row(int(k)) for k in indices]

    def lengths(self) -> list[int]:
        """Each example's length in tokens (trainer.group_by_length)."""
        return [len(self.row(k)["input_ids"]) for k in range(len(self))]

    def __iter__(self) -> Iterator[dict]:
        return (self.row(k) for k in range(len(self)))

    def __getitem__(self, key):
        if isinstance(key, str):
            return [self.row(k)[key] for k in range(len(self))]
        if isinstance(key, (int, np.integer)):
            if not -len(self) <= key < len(self):
                raise IndexError(key)
            return self.row(int(key) % len(self))
        indices = range(len(self))[key] if isinstance(key, slice) else key
        rows = self.rows(indices)
        return {name: [r[name] for r in rows] for name in self.column_names}

    def to_dict(self) -> dict[str, list]:
        return self[:]


class _VirtualStream:
    """A split's token stream with ``marks`` tokens around each unit (document or sentence) of each shard, read by
    stream position without building it: unit u of a shard with token ends ``ends`` covers stream positions
    ``[start_u + marks * u, ends[u] + marks * (u + 1))`` of that shard's part."""

    def __init__(self, split: StoreSplit, marks: int, unit: str):
        self.shards, self.marks, self.unit = split.shards, marks, unit
        sizes = [s.num_tokens + marks * len(self._ends(s)) for s in self.shards]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)

    def _ends(self, shard: Shard) -> np.ndarray:
        ends = shard.array("sentence_ends" if self.unit == "sentence" else "document_ends")
        if self.unit == "sentence" and not len(ends):
            raise DataError("the token store has no sentence boundaries; prepare it for sentence layouts")
        return ends

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def pieces(self, start: int, length: int) -> Iterator[tuple[Shard, int, int, int, int]]:
        """(shard, unit, first token, last token (exclusive), stream position of the unit's first token) of every
        unit that stream positions [start, start + length) touch, in order."""
        stop = start + length
        number = int(np.searchsorted(self.offsets, start, side="right")) - 1
        while start < stop and number < len(self.shards):
            shard, base = self.shards[number], int(self.offsets[number])
            ends = self._ends(shard)
            unit = _first_unit(ends, start - base, self.marks)
            while unit < len(ends) and base + (int(ends[unit - 1]) if unit else 0) + self.marks * unit < stop:
                first = int(ends[unit - 1]) if unit else 0
                yield shard, unit, first, int(ends[unit]), base + first + self.marks * unit
                unit += 1
            start = int(self.offsets[number + 1])
            number += 1


def _first_unit(ends: np.ndarray, position: int, marks: int) -> int:
    """The unit whose stream span holds ``position``: the smallest u with ends[u] + marks * (u + 1) > position."""
    low, high = 0, len(ends)
    while low < high:
        middle = (low + high) // 2
        if int(ends[middle]) + marks * (middle + 1) > position:
            high = middle
        else:
            low = middle + 1
    return low


class StreamWindows(ExampleView):
    """Window k = stream[k * stride : k * stride + length] of the documents joined by ``separator`` (one after every
    document); the loader's stream order (``data/batching/loader.py``) deals them out for a recurrent memory, GPT reads
    them shuffled."""

    column_names = ["input_ids"]

    def __init__(self, split: StoreSplit, separator: int, length: int, stride: int):
        # A foreign token file whose documents end with the separator already (data/store/foreign.py) gets none.
        self.marks = 0 if getattr(split, "separated", False) else 1
        self.stream = _VirtualStream(split, self.marks, "document")
        self.separator, self.length, self.stride = separator, length, stride
        self.count = (len(self.stream) - length) // stride + 1
        if self.count < 1:
            raise DataError(f"the corpus has {len(self.stream)} tokens, fewer than one window of {length}")

    def __len__(self) -> int:
        return self.count

    def window(self, index: int) -> np.ndarray:
        start = index * self.stride
        out = np.empty(self.length, np.int64)
        for shard, _, first, last, position in self.stream.pieces(start, self.length):
            # The unit's tokens, then its separator, clipped to the window.
            lo, hi = max(start - position, 0), min(start + self.length - position, last - first + self.marks)
            at = position + lo - start
            take = min(hi, last - first)
            if take > lo:
                out[at : at + take - lo] = shard.ids[first + lo : first + take]
            if self.marks and hi == last - first + 1:
                out[position + last - first - start] = self.separator
        return out

    def row(self, index: int) -> dict:
        return {"input_ids": self.window(index).tolist()}

    def lengths(self) -> list[int]:
        return [self.length] * len(self)


class SentenceStreamWindows(ExampleView):
    """ELMo's windows (``data/layouts/sentence_streams.py``): ``input_ids`` from the stream of ``<S> w1 .. wn </S>``
    sentences, ``reverse_ids`` the same window of the stream of ``</S> wn .. w1 <S>``; with ``unk_id``, also each
    window's spellings of its unk tokens, in its stream's order."""

    def __init__(self, split: StoreSplit, bos: int, eos: int, length: int, stride: int, unk_id: int | None = None):
        self.stream = _VirtualStream(split, 2, "sentence")
        self.bos, self.eos, self.length, self.stride, self.unk_id = bos, eos, length, stride, unk_id
        self.count = (len(self.stream) - length) // stride + 1
        if self.count < 1:
            raise DataError(
                f"the corpus has {len(self.stream)} tokens with sentence markers, fewer than one window of {length}"
            )
        self.column_names = ["input_ids", "reverse_ids"]
        if unk_id is not None:
            self.column_names += [spellings_key("input_ids"), spellings_key("reverse_ids")]

    def __len__(self) -> int:
        return self.count

    def row(self, index: int) -> dict:
        start = index * self.stride
        pieces = list(self.stream.pieces(start, self.length))
        out = {}
        for key, backward in (("input_ids", False), ("reverse_ids", True)):
            ids, tokens = [], []  # tokens: (shard, position) of every word, None for a marker
            for shard, _, first, last, _ in pieces:
                words = range(last - 1, first - 1, -1) if backward else range(first, last)
                ids += [self.eos if backward else self.bos, *shard.ids[first:last][:: -1 if backward else 1].tolist()]
                ids.append(self.bos if backward else self.eos)
                tokens += [None, *((shard, t) for t in words), None]
            lo = start - pieces[0][4] if pieces else 0  # pieces[0][4]: where the first sentence's <S> sits
            out[key] = ids[lo : lo + self.length]
            if self.unk_id is not None:
                window = tokens[lo : lo + self.length]
                unknown = [t for t, i in zip(window, out[key], strict=True) if t is not None and i == self.unk_id]
                out[spellings_key(key)] = [_spelling(shard, t) for shard, t in unknown]
        return out

    def lengths(self) -> list[int]:
        return [self.length] * len(self)


def _spelling(shard: Shard, token: int) -> str:
    positions = shard.array("unknown_positions")
    k = int(np.searchsorted(positions, token))
    ends = shard.array("unknown_ends")
    text = shard.array("unknown_text")
    return bytes(text[(int(ends[k - 1]) if k else 0) : int(ends[k])]).decode("utf-8")
