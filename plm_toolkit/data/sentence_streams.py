"""ELMo's training data (bilm-tf's ``BidirectionalLMDataset``): the corpus as a stream of sentences, each framed as
``<S> w1 .. wn </S>``, and beside it the same stream with every sentence reversed (``</S> wn .. w1 <S>``, sentences
in corpus order), both cut into the same windows.

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


def sentence_stream_windows(
    documents, bos_id: int, eos_id: int, length: int, stride: int, path: Path
) -> datasets.Dataset:
    """Rows ``input_ids`` (a window of the forward stream) and ``reverse_ids`` (the same window of the backward
    stream), ``length`` tokens each, a new window every ``stride`` tokens."""
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        forward, backward = sentence_streams(documents, bos_id, eos_id)
        count = (len(forward) - length) // stride + 1
        if count < 1:
            raise DataError(
                f"the corpus has {len(forward)} tokens with sentence markers, fewer than one window of {length}"
            )
        index = np.arange(count)[:, None] * stride + np.arange(length)[None, :]  # (count, length)
        schema = pa.schema([("input_ids", pa.list_(pa.int32())), ("reverse_ids", pa.list_(pa.int32()))])
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with pa.OSFile(str(temporary), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
            for lo in range(0, count, 1000):
                columns = [
                    pa.FixedSizeListArray.from_arrays(pa.array(stream[index[lo : lo + 1000]].reshape(-1)), length).cast(
                        pa.list_(pa.int32())
                    )
                    for stream in (forward, backward)
                ]
                writer.write_batch(pa.record_batch(columns, schema))
        os.replace(temporary, path)
    return datasets.Dataset.from_file(str(path))
