"""Layouts cut from the token store on the fly agree with the plain statement of each layout: stream windows across
shard boundaries, full-sentence blocks packed as ``pack_full_sentences`` packs them."""

import numpy as np
import pytest
from omegaconf import OmegaConf

from plm_toolkit.core.data_schema import DataConfig, TokenizerConfig, TokenizerKind
from plm_toolkit.data.layouts.packed import pack_blocks
from plm_toolkit.data.layouts.pretraining import pack_full_sentences
from plm_toolkit.data.layouts.windows import StreamWindows
from plm_toolkit.data.store.preparation import prepare_store
from plm_toolkit.data.store.token_store import TokenStore


@pytest.mark.parametrize("seed", range(4))
def test_pack_blocks_packs_as_pack_full_sentences(seed):
    rng = np.random.default_rng(seed)
    documents, token = [], 0
    for _ in range(int(rng.integers(1, 40))):
        sentences = []
        for _ in range(int(rng.integers(1, 6))):
            length = int(rng.integers(1, 30))
            sentences.append(list(range(token, token + length)))
            token += length
        documents.append(sentences)
    budget = int(rng.integers(3, 25))
    expected = list(pack_full_sentences(documents, budget, -1))
    sentence_ends = np.cumsum([len(s) for d in documents for s in d])
    document_sentences = np.cumsum([len(d) for d in documents])
    blocks = pack_blocks(sentence_ends, document_sentences, budget)
    # A block is a range of tokens with the separator before every document that starts inside it.
    starts = {d[0][0] for d in documents}
    got = [[t for t in range(a, b) for t in ((-1, t) if t in starts and t > a else (t,))] for a, b in blocks]
    assert got == expected
    assert pack_blocks(np.zeros(0, np.int64), np.zeros(0, np.int64), budget).shape == (0, 2)  # a shard of blank lines


def test_stream_windows_cross_shards_as_one_stream(tmp_path):
    documents = [f"Document {k}: " + "words and more words. " * (k % 7 + 1) for k in range(80)]
    (tmp_path / "c.txt").write_text("\n\n".join(documents) + "\n", encoding="utf-8")
    cfg = OmegaConf.structured(
        DataConfig(
            train_files=[str(tmp_path / "c.txt")],
            cache_dir=str(tmp_path / "cache"),
            shard_bytes=2048,
            tokenizer=TokenizerConfig(kind=TokenizerKind.character, vocab_size=100),
        )
    )
    store = TokenStore(prepare_store(cfg, "documents"))
    split = store.split("train")
    assert len(split.shards) > 3
    separator = 3
    stream = [t for d in split.documents() for t in [*d[0], separator]]
    for length, stride in ((17, 16), (13, 5), (40, 40)):
        windows = StreamWindows(split, separator, length, stride)
        assert len(windows) == (len(stream) - length) // stride + 1
        for k in range(len(windows)):
            assert windows[k]["input_ids"] == stream[k * stride : k * stride + length]


def test_sentence_pairs_are_the_same_drawn_by_one_process_or_two(tmp_path):
    from plm_toolkit.data.layouts.packed import SegmentPairExamples
    from tests.data.layouts.test_pretraining import labelled_corpus

    cfg = labelled_corpus(tmp_path, num_documents=150, max_seq_len=40, shard_bytes=4096)
    store = TokenStore(prepare_store(cfg, "sentences"))
    split = store.split("train")
    assert len(split.shards) > 3
    settings = {"max_seq_len": 40, "short_seq_prob": 0.1, "random_next_prob": 0.5, "contiguous": False}
    one = SegmentPairExamples(split, 2, 3, settings, 7, tmp_path / "one", processes=1)
    two = SegmentPairExamples(split, 2, 3, settings, 7, tmp_path / "two", processes=2)
    assert len(one) == len(two) > 300
    assert one.to_dict() == two.to_dict()
    labels = np.array(one["next_sentence_label"])
    assert 0.4 < labels.mean() < 0.65  # random next sentences come from every shard's documents
