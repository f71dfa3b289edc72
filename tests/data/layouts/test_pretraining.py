"""Example building (BERT sentence pairs, RoBERTa full sentences), its cache, and batching.

Most tests use a corpus whose every word names its document and sentence (`d3s5` is a word of sentence 5 of
document 3) and a vocab.txt holding those words, so that each token says where it came from.
"""

import pickle
import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from plm_toolkit.core.data_schema import DataConfig, TokenizerConfig
from plm_toolkit.data.batching.collate import Collator, collate
from plm_toolkit.data.build import prepare_pretraining_data
from plm_toolkit.data.layouts import packed as packed_module
from plm_toolkit.data.layouts import sentence_pairs
from plm_toolkit.data.layouts.pretraining import pack_full_sentences
from plm_toolkit.data.layouts.registry import build_pretraining_examples
from plm_toolkit.data.store import preparation as preparation_module
from plm_toolkit.data.tokenization.vocab import Vocab

WORDS_PER_SENTENCE = 4  # + the period: every sentence is 5 tokens


def labelled_corpus(tmp_path: Path, num_documents=120, seed=0, max_sentences=12, **fields) -> DataConfig:
    """Documents of 2..max_sentences sentences, three sentences a line, and the vocab.txt of their words."""
    rng = np.random.default_rng(seed)
    blocks, words = [], []
    for d in range(num_documents):
        sentences = []
        for s in range(int(rng.integers(2, max_sentences + 1))):
            word = f"d{d}s{s}"
            words.append(word)
            sentences.append(" ".join([word.upper()] + [word] * (WORDS_PER_SENTENCE - 1)) + ".")
        blocks.append("\n".join(" ".join(sentences[i : i + 3]) for i in range(0, len(sentences), 3)))
    corpus = tmp_path / "labelled.txt"
    corpus.write_text("\n\n".join(blocks) + "\n", encoding="utf-8")
    vocab_txt = tmp_path / "vocab.txt"
    vocab_txt.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", *words]) + "\n")
    fields.setdefault("cache_dir", str(tmp_path / "cache"))
    return DataConfig(train_files=[str(corpus)], tokenizer=TokenizerConfig(path=str(vocab_txt)), **fields)


def origins(data, ids):
    """(document, sentence) of each token; None for the period."""
    out = []
    for token in (data.tokenizer.id_to_token(i) for i in ids):
        if token == ".":
            out.append(None)
        else:
            document, sentence = token[1:].split("s")
            out.append((int(document), int(sentence)))
    return out


def segments(example, vocab):
    """Segments A and B of `[CLS] A [SEP] B [SEP]`."""
    ids = example["input_ids"]
    first_sep = ids.index(vocab.sep_id)
    return ids[1:first_sep], ids[first_sep + 1 : -1]


def test_sentence_pairs_layout_and_lengths(tmp_path):
    data = prepare_pretraining_data(labelled_corpus(tmp_path, max_seq_len=40), "sentence_pairs", seed=0)
    vocab = data.vocab
    assert data.validation is None and len(data.train) > 100
    assert set(data.train.column_names) == {"input_ids", "token_type_ids", "next_sentence_label"}
    for example in data.train:
        ids, types = example["input_ids"], example["token_type_ids"]
        assert len(ids) <= 40 and len(types) == len(ids)
        assert ids[0] == vocab.cls_id and ids[-1] == vocab.sep_id and ids.count(vocab.sep_id) == 2
        a, b = segments(example, vocab)
        assert len(a) >= 1 and len(b) >= 1
        assert types == [0] * (len(a) + 2) + [1] * (len(b) + 1)


def test_sentence_pairs_next_sentence_labels(tmp_path):
    cfg = labelled_corpus(tmp_path, num_documents=300, max_seq_len=40, short_seq_prob=0.0)
    data = prepare_pretraining_data(cfg, "sentence_pairs", seed=3)
    labels = np.array(data.train["next_sentence_label"])
    # 50% random next sentences, plus BERT's forced random B for one-sentence chunks.
    assert len(labels) > 500 and 0.45 < labels.mean() < 0.6
    for example in data.train:
        a, b = (origins(data, s) for s in segments(example, data.vocab))
        a_sentences = {o for o in a if o}
        b_sentences = {o for o in b if o}
        (a_document,) = {d for d, _ in a_sentences}  # A is always from one document
        b_documents = {d for d, _ in b_sentences}
        if example["next_sentence_label"] == 0:
            # B is the actual continuation: the sentences right after A's last one, in order.
            assert b_documents == {a_document}
            last_a = max(s for _, s in a_sentences)
            b_order = sorted(s for _, s in b_sentences)
            assert b_order[0] == last_a + 1 and b_order == list(range(b_order[0], b_order[-1] + 1))
        else:
            assert len(b_documents) == 1 and a_document not in b_documents


def test_short_seq_prob_gives_shorter_pairs(tmp_path):
    cfg = labelled_corpus(tmp_path, max_seq_len=64, max_sentences=40, short_seq_prob=0.0)
    long = prepare_pretraining_data(cfg, "sentence_pairs", seed=0)
    cfg.short_seq_prob, cfg.cache_dir = 1.0, str(tmp_path / "c2")
    short = prepare_pretraining_data(cfg, "sentence_pairs", seed=0)
    mean = lambda data: np.mean([len(ids) for ids in data.train["input_ids"]])
    # Targets uniform in [2, 61] instead of 61: about half as long.
    assert mean(long) > 45 and mean(short) < 0.7 * mean(long)


def test_examples_are_deterministic_given_the_seed(tmp_path):
    def build(seed, cache):
        cfg = labelled_corpus(tmp_path, max_seq_len=40, cache_dir=str(tmp_path / cache))
        return prepare_pretraining_data(cfg, "sentence_pairs", seed).train.to_dict()

    assert build(7, "a") == build(7, "b")
    assert build(7, "a") != build(8, "c")


def test_second_run_reuses_the_cached_examples(tmp_path, monkeypatch):
    cfg = labelled_corpus(tmp_path, max_seq_len=40, validation_files=[])
    first = prepare_pretraining_data(cfg, "sentence_pairs", seed=1).train.to_dict()
    assert len(list((tmp_path / "cache" / "stores").glob("*/layouts/pairs-train-*"))) == 1

    def fail(*args, **kwargs):
        raise AssertionError("rebuilt instead of reusing the cache")

    monkeypatch.setattr(packed_module, "document_pairs", fail)
    monkeypatch.setattr(preparation_module, "tokenize_piece", fail)
    assert prepare_pretraining_data(cfg, "sentence_pairs", seed=1).train.to_dict() == first


def test_full_sentences_pack_across_documents(tmp_path):
    cfg = labelled_corpus(tmp_path, num_documents=40, max_seq_len=31)
    data = prepare_pretraining_data(cfg, "full_sentences", seed=0)
    vocab = data.vocab
    assert data.train.column_names == ["input_ids", "token_type_ids"]
    examples = list(data.train)
    crossing = 0
    for example in examples:
        ids = example["input_ids"]
        assert ids[0] == vocab.cls_id and ids[-1] == vocab.sep_id and len(ids) <= 31
        assert example["token_type_ids"] == [0] * len(ids)
        inner = ids[1:-1]
        assert inner[0] != vocab.sep_id and inner[-1] != vocab.sep_id
        crossing += vocab.sep_id in inner
    # Every block but the last is full up to one sentence (5 tokens): the next one did not fit.
    assert all(len(e["input_ids"]) > 31 - 5 for e in examples[:-1])
    assert crossing > len(examples) // 4
    # Dropping the specials gives the corpus back, whole sentences in order.
    tokens = [t for e in examples for t in origins(data, [i for i in e["input_ids"] if i > 4])]
    order = [o for o in tokens if o]
    assert order == sorted(order)
    assert len(tokens) == 5 * len(set(order))


def test_pack_full_sentences_rules():
    sep = 99
    blocks = list(pack_full_sentences([[[1, 1], [2, 2, 2]], [[3, 3, 3]], [[4] * 11]], 5, sep))
    # [1 1 | 2 2 2] is full; document 2 starts afresh (no leading separator); a long sentence is cut.
    assert blocks == [[1, 1, 2, 2, 2], [3, 3, 3], [4] * 5, [4] * 5, [4]]
    assert list(pack_full_sentences([[[1]], [[2]], [[3, 3]]], 6, sep)) == [[1, sep, 2, sep, 3, 3]]


def test_validation_split_is_built_when_given(tmp_path):
    cfg = labelled_corpus(tmp_path, max_seq_len=40)
    valid = tmp_path / "valid.txt"
    valid.write_text("D1s1 d1s1 d1s1 d1s1. D1s2 d1s2.\n\nD2s1 d2s1. D2s2 d2s2.\n", encoding="utf-8")
    cfg.validation_files = [str(valid)]
    data = prepare_pretraining_data(cfg, "full_sentences", seed=0)
    assert len(data.validation) == 1 and data.validation[0]["input_ids"].count(data.vocab.sep_id) == 2


def test_saved_dataset_with_a_trained_tokenizer(tmp_path):
    import datasets

    folder = tmp_path / "saved"
    texts = [f"Document {d} starts here. It has a second sentence.\nAnd a third one." for d in range(20)]
    datasets.DatasetDict(
        train=datasets.Dataset.from_dict({"body": texts}),
        validation=datasets.Dataset.from_dict({"body": texts[:3]}),
    ).save_to_disk(str(folder))
    before = sorted(p.name for p in folder.rglob("*"))
    cfg = DataConfig(
        dataset_path=str(folder),
        text_column="body",
        cache_dir=str(tmp_path / "cache"),
        tokenizer=TokenizerConfig(vocab_size=60, min_frequency=1),
    )
    data = prepare_pretraining_data(cfg, "sentence_pairs", seed=0)
    assert len(data.train) >= 20 and len(data.validation) >= 3
    assert sorted(p.name for p in folder.rglob("*")) == before  # caches never land in the user's folder


def test_one_document_draws_negatives_from_elsewhere_in_it(tmp_path, caplog):
    cfg = labelled_corpus(tmp_path, num_documents=1, max_sentences=40, max_seq_len=24, short_seq_prob=0.0)
    data = prepare_pretraining_data(cfg, "sentence_pairs", seed=0)
    assert "labelled.txt holds one document" in caplog.text
    for example in data.train:
        if example["next_sentence_label"] == 1:
            a, b = (origins(data, s) for s in segments(example, data.vocab))
            last_a = max(s for o in a if o for _, s in [o])
            first_b = min(s for o in b if o for _, s in [o])
            assert first_b != last_a + 1


def test_unknown_layout(tmp_path):
    cfg = labelled_corpus(tmp_path, num_documents=2)
    data = prepare_pretraining_data(cfg, "full_sentences", seed=0)
    with pytest.raises(ValueError, match="layout must be one of"):
        build_pretraining_examples(cfg, data.tokenizer, data.vocab, "permutations", "train", 0)


def test_bundled_corpus_builds_quickly(tmp_path):
    from omegaconf import OmegaConf

    from plm_toolkit.core.resources import register_resolvers

    register_resolvers()
    cfg = OmegaConf.merge(
        OmegaConf.structured(DataConfig),
        {
            "train_files": ["${plm_resource:corpora/wikitext2/train.txt}"],
            "validation_files": ["${plm_resource:corpora/wikitext2/valid.txt}"],
            "cache_dir": str(tmp_path),
            "tokenizer": {"vocab_size": 2000},
        },
    )
    data = prepare_pretraining_data(cfg, "sentence_pairs", seed=0)
    assert data.vocab.size == 2000 and len(data.train) > 1000 and len(data.validation) > 50
    assert max(len(ids) for ids in data.train["input_ids"]) == 128
    assert 0.45 < np.mean(data.train["next_sentence_label"]) < 0.6


VOCAB = Vocab(size=50, pad_id=0, unk_id=1, cls_id=2, sep_id=3, mask_id=4)


def test_collate_pads_and_masks():
    examples = [
        {"input_ids": [2, 10, 11, 3, 12, 3], "token_type_ids": [0, 0, 0, 0, 1, 1], "next_sentence_label": 1},
        {"input_ids": [2, 1, 3, 13, 3], "token_type_ids": [0, 0, 0, 1, 1], "next_sentence_label": 0},
        {"input_ids": [2, 14, 3], "token_type_ids": [0, 0, 0], "next_sentence_label": 0},
    ]
    batch = collate(examples, VOCAB)
    assert batch["input_ids"].tolist() == [[2, 10, 11, 3, 12, 3], [2, 1, 3, 13, 3, 0], [2, 14, 3, 0, 0, 0]]
    assert batch["token_type_ids"].tolist() == [[0, 0, 0, 0, 1, 1], [0, 0, 0, 1, 1, 0], [0, 0, 0, 0, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1] * 6, [1] * 5 + [0], [1] * 3 + [0] * 3]
    # [CLS], [SEP] and padding are never masked; [UNK] (id 1) is an ordinary token, as in BERT.
    assert batch["special_tokens_mask"].tolist() == [
        [True, False, False, True, False, True],
        [True, False, True, False, True, True],
        [True, False, True, True, True, True],
    ]
    assert batch["next_sentence_label"].tolist() == [1, 0, 0]
    assert batch["input_ids"].dtype == torch.long and batch["special_tokens_mask"].dtype == torch.bool


def test_collator_is_picklable_and_handles_full_sentences():
    collator = pickle.loads(pickle.dumps(Collator(VOCAB)))
    batch = collator([{"input_ids": [2, 5, 3], "token_type_ids": [0, 0, 0]}, {"input_ids": [2, 3]}])
    assert set(batch) == {"input_ids", "token_type_ids", "attention_mask", "special_tokens_mask"}
    assert batch["input_ids"].shape == (2, 3) and batch["token_type_ids"].sum() == 0


@pytest.mark.slow
def test_one_line_corpus_of_two_million_words_builds(tmp_path, caplog):
    """A corpus that is one 2-million-word line without sentence ends used to hang while building pairs (a
    token-by-token truncation and a re-read of the whole document per pair): it is cut into pieces of a pair's
    length, counted in a warning, and every piece is used. Both pair layouts share the tokenized cache."""
    words = [f"w{i}" for i in range(50)]
    rng = np.random.default_rng(0)
    line = " ".join(words[i] for i in rng.integers(0, len(words), 2_000_000))
    (tmp_path / "one_line.txt").write_text(line + "\n")
    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    cfg = DataConfig(
        train_files=[str(tmp_path / "one_line.txt")],
        tokenizer=TokenizerConfig(path=str(tmp_path / "vocab.txt")),
        cache_dir=str(tmp_path / "cache"),
        max_seq_len=128,
    )
    for layout in ("sentence_pairs", "segment_pairs"):
        caplog.clear()
        with caplog.at_level("WARNING"):
            data = prepare_pretraining_data(cfg, layout, seed=0)
        # One sentence, read in pieces of about 256K characters (data/sources/text_files.py bounds a document's
        # memory), each longer than 4 pairs.
        assert re.search(
            r"\d+ sentence\(s\) of the train text longer than 4 pairs \(500 tokens\) were cut into pieces of 125 "
            "tokens",
            caplog.text,
        )
        lengths = np.array([len(ids) for ids in data.train["input_ids"]])
        assert lengths.max() <= 128 and lengths.mean() > 100
        if layout == "segment_pairs":  # in-order pairs of one document: every token is used once, but for the
            # last short piece of each fragment's sentence (at most 124 tokens for each 256K characters)
            used = int((lengths - 3).sum())
            assert 2_000_000 - 124 * (len(line) // (1 << 17) + 1) <= used <= 2_000_000


def test_truncate_pair_matches_token_by_token_trimming():
    """The linear truncation ends with the lengths of BERT's one-token-at-a-time loop and cuts only the ends."""
    for la, lb, budget in [(10, 3, 8), (3, 10, 8), (5, 5, 7), (5, 5, 6), (100_000, 40, 125), (0, 9, 4), (4, 4, 20)]:
        a, b = list(range(la)), list(range(1000, 1000 + lb))
        sentence_pairs._truncate_pair(a, b, budget, random.Random(0))
        ra, rb = la, lb
        while ra + rb > budget:
            if ra > rb:
                ra -= 1
            else:
                rb -= 1
        assert (len(a), len(b)) == (ra, rb)
        assert a == list(range(a[0], a[0] + len(a))) if a else True
        assert b == list(range(b[0], b[0] + len(b))) if b else True
