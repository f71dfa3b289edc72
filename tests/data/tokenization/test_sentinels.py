"""T5's vocabulary: a unigram LM with <pad> </s> <unk> first and 100 sentinels last, trained here or loaded from a
tokenizer.json in the layout of the released T5 tokenizers."""

import json

import pytest

from plm_toolkit.core.data_schema import TokenizerKind
from plm_toolkit.core.errors import DataError
from plm_toolkit.data.tokenization.sentinels import check_sentinels
from plm_toolkit.data.tokenization.tokenizer import load_or_train_tokenizer, load_tokenizer, vocab_from_tokenizer
from tests.data.tokenization.test_tokenizer import TEXT, trained_cfg

CORPUS = TEXT * 3


def test_trained_t5_vocabulary(tmp_path):
    tokenizer = load_or_train_tokenizer(trained_cfg(tmp_path, CORPUS, kind=TokenizerKind.t5_unigram, vocab_size=180))
    vocab = vocab_from_tokenizer(tokenizer)
    assert (vocab.pad_id, vocab.eos_id, vocab.unk_id) == (0, 1, 2)
    assert vocab.size == tokenizer.get_vocab_size() <= 180
    # <extra_id_0> is the last id, <extra_id_99> the 100th from the end.
    assert vocab.sentinel_ids == tuple(range(vocab.size - 1, vocab.size - 101, -1))
    assert tokenizer.id_to_token(vocab.size - 1) == "<extra_id_0>"
    check_sentinels(vocab.sentinel_ids, vocab.size)
    # Cased, with T5's template: a text ends with </s>; sentinels are never split.
    encoding = tokenizer.encode("The Fox <extra_id_3> sleeps.")
    assert encoding.tokens[-1] == "</s>" and "<extra_id_3>" in encoding.tokens
    assert tokenizer.decode(tokenizer.encode("The Fox sleeps.").ids) == "The Fox sleeps."
    assert vocab.cls_id is None and vocab.mask_id is None


def test_loads_the_released_t5_tokenizer_layout(tmp_path):
    # transformers' T5Tokenizer writes the layout of the released tokenizer.json (spiece.model converted): the
    # sentinels inside the unigram model and as added tokens. Build one from our pieces and read it back.
    transformers = pytest.importorskip("transformers")
    ours = load_or_train_tokenizer(trained_cfg(tmp_path, CORPUS, kind=TokenizerKind.t5_unigram, vocab_size=180))
    pieces = _pieces(ours)
    pieces += [(f"<extra_id_{k}>", 0.0) for k in reversed(range(100))]
    released = transformers.T5Tokenizer(vocab=pieces, extra_ids=100)
    released.save_pretrained(tmp_path / "t5")
    loaded = load_tokenizer(tmp_path / "t5" / "tokenizer.json")
    vocab = vocab_from_tokenizer(loaded)
    assert (vocab.pad_id, vocab.eos_id, vocab.unk_id) == (0, 1, 2)
    assert vocab.sentinel_ids == tuple(released.convert_tokens_to_ids(f"<extra_id_{k}>") for k in range(100))
    check_sentinels(vocab.sentinel_ids, vocab.size)
    text = "The Fox sleeps under <extra_id_0> trees."
    assert loaded.encode(text).ids == released(text).input_ids


def _pieces(tokenizer) -> list[tuple[str, float]]:
    """(piece, log-probability) of a trained unigram tokenizer, read from its serialized model."""
    model = json.loads(tokenizer.to_str())["model"]
    return [(p, s) for p, s in model["vocab"] if not p.startswith("<extra_id_")]


def test_vocabulary_without_sentinels_or_out_of_place(tmp_path):
    with pytest.raises(DataError, match="has no sentinel tokens"):
        check_sentinels((), 500)
    with pytest.raises(DataError, match="not the vocabulary's last ids"):
        check_sentinels((450, 449), 500)
