"""ELMo's training data (bilm-tf's ``BidirectionalLMDataset``): the corpus as a stream of sentences, each framed as
``<S> w1 .. wn </S>``, and beside it the same stream with every sentence reversed (``</S> wn .. w1 <S>``, sentences
in corpus order), both cut into the same windows.

``data/layouts/windows.py`` (``SentenceStreamWindows``) cuts the windows from the token store on the fly; ``sentence_streams``
builds both streams whole, the plain statement of the format that tests check it against.
"""

from __future__ import annotations

import numpy as np


def sentence_streams(documents, bos_id: int, eos_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) int32 streams of the sentences of ``documents`` (lists of sentences of token ids)."""
    forward: list[int] = []
    backward: list[int] = []
    for document in documents:
        for sentence in document:
            forward += [bos_id, *sentence, eos_id]
            backward += [eos_id, *reversed(sentence), bos_id]
    return np.asarray(forward, dtype=np.int32), np.asarray(backward, dtype=np.int32)
