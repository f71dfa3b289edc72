"""ELMo's training data (bilm-tf's ``BidirectionalLMDataset``): the corpus as a stream of sentences, each framed as
``<S> w1 .. wn </S>``, and beside it the same stream with every sentence reversed (``</S> wn .. w1 <S>``, sentences
in corpus order), both cut into the same windows. With the spelling of every word the vocabulary maps to <UNK>
(``data/spellings.py``), each window also lists those of its own <UNK> words, in its stream's order, so that the
character CNN reads them as written.

Window k of either stream covers positions [k * stride, k * stride + length); the loader's stream order deals the
windows out so that row b of consecutive batches continues the same part of the text, which the biLM's carried LSTM
states rely on. Written with pyarrow in one pass and cached like the other layouts.
"""

from __future__ import annotations

import os
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa

from plm_toolkit.data.spellings import spellings_key, unknown_positions, window_spellings
from plm_toolkit.errors import DataError


def sentence_streams(documents, bos_id: int, eos_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) int32 streams of the sentences of ``documents`` (lists of sentences of token ids)."""
    forward: list[int] = []
    backward: list[int] = []
    for document in documents:
        for sentence in document:
            forward += [bos_id, *sentence, eos_id]
            backward += [eos_id, *reversed(sentence), bos_id]
    return np.asarray(forward, dtype=np.int32), np.asarray(backward, dtype=np.int32)


def sentence_spellings(unknown) -> tuple[list[str], list[str]]:
    """(forward, backward) spellings of the <UNK> words of both streams, in stream order, from each document's
    sentences' spellings (``unknown``, parallel to the documents of ``sentence_streams``)."""
    forward: list[str] = []
    backward: list[str] = []
    for document in unknown:
        for sentence in document:
            forward += sentence
            backward += reversed(sentence)
    return forward, backward


def sentence_stream_windows(
    documents, bos_id: int, eos_id: int, length: int, stride: int, path: Path, unknown=None, unk_id: int | None = None
) -> datasets.Dataset:
    """Rows ``input_ids`` (a window of the forward stream) and ``reverse_ids`` (the same window of the backward
    stream), ``length`` tokens each, a new window every ``stride`` tokens. With ``unknown`` (the spellings of each
    document's sentences' ``unk_id`` tokens, parallel to ``documents``) also ``input_spellings`` and
    ``reverse_spellings``, each window's share of them."""
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        streams = sentence_streams(documents, bos_id, eos_id)
        spelled = []  # per stream: (positions of its unk tokens, their spellings)
        if unknown is not None:
            spellings = sentence_spellings(unknown)
            spelled = [(unknown_positions(s, unk_id, w), w) for s, w in zip(streams, spellings, strict=True)]
        count = (len(streams[0]) - length) // stride + 1
        if count < 1:
            raise DataError(
                f"the corpus has {len(streams[0])} tokens with sentence markers, fewer than one window of {length}"
            )
        index = np.arange(count)[:, None] * stride + np.arange(length)[None, :]  # (count, length)
        keys = ("input_ids", "reverse_ids")
        fields = [(key, pa.list_(pa.int32())) for key in keys]
        if spelled:
            fields += [(spellings_key(key), pa.list_(pa.string())) for key in keys]
        schema = pa.schema(fields)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with pa.OSFile(str(temporary), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
            for lo in range(0, count, 1000):
                hi = min(lo + 1000, count)
                columns = [
                    pa.FixedSizeListArray.from_arrays(pa.array(stream[index[lo:hi]].reshape(-1)), length).cast(
                        pa.list_(pa.int32())
                    )
                    for stream in streams
                ]
                columns += [
                    pa.array(window_spellings(at, words, length, stride, lo, hi), pa.list_(pa.string()))
                    for at, words in spelled
                ]
                writer.write_batch(pa.record_batch(columns, schema))
        os.replace(temporary, path)
    return datasets.Dataset.from_file(str(path))
