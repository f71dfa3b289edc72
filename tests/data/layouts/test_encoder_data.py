"""Data for the encoder family: in-order segment pairs (SOP), byte-level BPE vocabularies, word continuations."""

import json
import random

import pytest

from plm_toolkit.core.data_schema import DataConfig, TokenizerConfig
from plm_toolkit.core.errors import DataError
from plm_toolkit.data.layouts.registry import build_pretraining_examples
from plm_toolkit.data.layouts.sentence_pairs import document_pairs
from plm_toolkit.data.tokenization.tokenizer import load_or_train_tokenizer, load_tokenizer, vocab_from_tokenizer

TEXT = (
    "The quick brown fox jumps over the lazy dog. The dog sleeps.\nFoxes and dogs are animals.\n\n"
    "A second document talks about cats. Cats chase mice, and mice run.\n\n"
    "Running, jumping and sleeping are what animals do all day.\n"
) * 5


def test_segment_pairs_are_consecutive_and_in_order():
    # Sentence s of document d is [100 d + 10 s, 100 d + 10 s + 1, ...]: any token says where it came from.
    documents = [[[100 * d + 10 * s + k for k in range(3 + s % 3)] for s in range(n)] for d, n in enumerate([6, 1, 9])]
    rng = random.Random(0)
    for index, document in enumerate(documents):
        flat = [t for sentence in document for t in sentence]
        pairs = list(document_pairs(document, index, [], 64, 0.5, 0.5, rng, contiguous=True))
        assert pairs and all(label == 0 for _, _, label in pairs)
        for a, b, _ in pairs:
            assert a and b
            joined = a + b  # B continues A inside one document: the pair is a slice of the document
            start = flat.index(joined[0])
            assert flat[start : start + len(joined)] == joined
    # A one-sentence document is cut inside its sentence rather than paired with a random B.
    ((a, b, _),) = document_pairs([[7, 8, 9, 10]], 0, [], 64, 0.0, 1.0, random.Random(1), contiguous=True)
    assert a + b == [7, 8, 9, 10]
    assert list(document_pairs([[7]], 0, [], 64, 0.0, 1.0, random.Random(1), contiguous=True)) == []


def bpe_cfg(tmp_path, **tokenizer):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT, encoding="utf-8")
    return DataConfig(
        train_files=[str(corpus)],
        cache_dir=str(tmp_path / "cache"),
        max_seq_len=24,
        tokenizer=TokenizerConfig(kind="bpe", vocab_size=400, **tokenizer),
    )


def test_trained_byte_level_bpe_has_roberta_specials_and_marks_continuations(tmp_path):
    cfg = bpe_cfg(tmp_path)
    tok = load_or_train_tokenizer(cfg)
    vocab = vocab_from_tokenizer(tok)
    assert (vocab.cls_id, vocab.pad_id, vocab.sep_id, vocab.unk_id, vocab.mask_id) == (0, 1, 2, 3, 4)
    encoding = tok.encode("The Foxes sleep.", "Cats run.")
    assert encoding.tokens[0] == "<s>" and encoding.tokens.count("</s>") == 3  # <s> A </s></s> B </s>
    assert tok.decode(tok.encode("Ünïcode naïve text").ids) == " Ünïcode naïve text"  # bytes: nothing is unknown
    pieces = tok.encode("jumping", add_special_tokens=False)
    assert pieces.tokens[0].startswith("\u0120") and pieces.ids[0] not in vocab.continuation_ids
    assert all(i in vocab.continuation_ids for i in pieces.ids[1:])
    assert not set(vocab.special_ids) & vocab.continuation_ids
    examples = build_pretraining_examples(cfg, tok, vocab, "segment_pairs", "train", seed=0)
    first = examples[0]["input_ids"]
    assert first[0] == vocab.cls_id and first[-1] == vocab.sep_id and first.count(vocab.sep_id) == 2


def test_vocab_json_and_merges_load_as_byte_level_bpe(tmp_path):
    tok = load_or_train_tokenizer(bpe_cfg(tmp_path))
    model = json.loads(tok.to_str())["model"]
    (tmp_path / "vocab.json").write_text(json.dumps(model["vocab"]))
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    (tmp_path / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    loaded = load_tokenizer(tmp_path / "vocab.json")
    text = "The lazy dog jumps over the fox."
    assert loaded.encode(text).ids == tok.encode(text).ids
    assert vocab_from_tokenizer(loaded).continuation_ids == vocab_from_tokenizer(tok).continuation_ids
    (tmp_path / "merges.txt").unlink()
    with pytest.raises(DataError, match="no merges.txt beside it"):
        load_tokenizer(tmp_path / "vocab.json")


def test_wordpiece_continuations_are_the_hash_pieces(tmp_path):
    cfg = bpe_cfg(tmp_path)
    cfg.tokenizer.kind = "wordpiece"
    tok = load_or_train_tokenizer(cfg)
    continuation = vocab_from_tokenizer(tok).continuation_ids
    assert continuation and all(tok.id_to_token(i).startswith("##") for i in continuation)
