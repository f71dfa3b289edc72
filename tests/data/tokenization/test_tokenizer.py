"""Tokenizers: training and its cache, loading vocab.txt / tokenizer.json, special tokens, one-line errors."""

from types import SimpleNamespace

import pytest

from plm_toolkit.core.data_schema import DataConfig, TokenizerConfig
from plm_toolkit.core.errors import DataError
from plm_toolkit.data.tokenization import tokenizer as tokenizer_module
from plm_toolkit.data.tokenization import vocabulary_training
from plm_toolkit.data.tokenization.tokenizer import (
    load_or_train_tokenizer,
    load_tokenizer,
    save_tokenizer,
    vocab_from_tokenizer,
)

TEXT = (
    "The quick brown fox jumps over the lazy dog. The dog sleeps.\nFoxes and dogs are animals.\n\n"
    "A second document talks about cats. Cats chase mice, and mice run.\n\n"
    "Running, jumping and sleeping are what animals do all day.\n"
) * 5


def trained_cfg(tmp_path, text=TEXT, **tokenizer):
    corpus = tmp_path / "corpus.txt"
    if not corpus.exists():
        corpus.write_text(text, encoding="utf-8")
    tokenizer.setdefault("vocab_size", 120)
    return DataConfig(
        train_files=[str(corpus)], cache_dir=str(tmp_path / "cache"), tokenizer=TokenizerConfig(**tokenizer)
    )


def test_trained_tokenizer_has_bert_special_tokens_and_template(tmp_path):
    tok = load_or_train_tokenizer(trained_cfg(tmp_path))
    vocab = vocab_from_tokenizer(tok)
    assert (vocab.pad_id, vocab.unk_id, vocab.cls_id, vocab.sep_id, vocab.mask_id) == (0, 1, 2, 3, 4)
    assert vocab.size == tok.get_vocab_size() <= 120
    encoding = tok.encode("The Fox sleeps.", "Cats run.")
    assert encoding.tokens[0] == "[CLS]" and encoding.tokens.count("[SEP]") == 2
    assert encoding.type_ids == [0] * (encoding.tokens.index("[SEP]") + 1) + [1] * (
        len(encoding.tokens) - encoding.tokens.index("[SEP]") - 1
    )
    assert "fox" in encoding.tokens  # lower-cased
    assert tok.encode("[MASK] fox", add_special_tokens=False).ids[0] == vocab.mask_id


def test_trained_tokenizer_is_cached_and_reused(tmp_path, monkeypatch):
    cfg = trained_cfg(tmp_path)
    first = load_or_train_tokenizer(cfg)
    cached = list((tmp_path / "cache" / "tokenizers").glob("*.json"))
    assert len(cached) == 1

    def no_training(*args, **kwargs):
        raise AssertionError("trained again instead of loading the cached tokenizer")

    monkeypatch.setattr(vocabulary_training, "trainers", SimpleNamespace(WordPieceTrainer=no_training))
    second = load_or_train_tokenizer(cfg)
    assert second.get_vocab() == first.get_vocab()
    assert second.encode("Cats chase dogs.").ids == first.encode("Cats chase dogs.").ids
    monkeypatch.undo()

    # A different setting, or different file contents, trains (and caches) another one.
    load_or_train_tokenizer(trained_cfg(tmp_path, vocab_size=100))
    (tmp_path / "corpus.txt").write_text(TEXT + "\n\nZebras appear.\n", encoding="utf-8")
    load_or_train_tokenizer(trained_cfg(tmp_path))
    assert len(list((tmp_path / "cache" / "tokenizers").glob("*.json"))) == 3


def test_cased_setting_keeps_case(tmp_path):
    tok = load_or_train_tokenizer(trained_cfg(tmp_path, lowercase=False))
    assert "The" in tok.encode("The", add_special_tokens=False).tokens


def test_save_and_load_round_trip(tmp_path):
    tok = load_or_train_tokenizer(trained_cfg(tmp_path))
    path = save_tokenizer(tok, tmp_path / "checkpoint")
    assert path.name == "tokenizer.json"
    for source in (path, path.parent):
        loaded = load_tokenizer(source)
        assert loaded.encode("Dogs jump.", "Cats.").ids == tok.encode("Dogs jump.", "Cats.").ids
    cfg = trained_cfg(tmp_path, path=str(path))
    assert vocab_from_tokenizer(load_or_train_tokenizer(cfg)) == vocab_from_tokenizer(tok)


def test_small_vocab_txt_tokenizes_like_bert(tmp_path):
    vocab_txt = tmp_path / "vocab.txt"
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", "he", "is", ",", "!"]
    vocab_txt.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    tok = load_tokenizer(vocab_txt)
    # The example of BERT's README (WordPiece, greedy longest-match-first).
    assert tok.encode("He is UNAFFABLE!", add_special_tokens=False).tokens == [
        "he", "is", "un", "##aff", "##able", "!"
    ]  # fmt: skip
    assert tok.encode("He is nice").tokens == ["[CLS]", "he", "is", "[UNK]", "[SEP]"]


def test_bert_base_uncased_vocab_txt(shared_data):
    tok = load_tokenizer(shared_data / "models" / "bert-base-uncased" / "vocab.txt")
    assert vocab_from_tokenizer(tok) == tokenizer_module.Vocab(30522, 0, 100, 101, 102, 103)
    # The real vocabulary has no "##aff": BERT itself gives una ##ffa ##ble here (its README example is
    # illustrative), which the parity test below confirms against transformers.
    assert tok.encode("unaffable", add_special_tokens=False).tokens == ["una", "##ffa", "##ble"]
    encoding = tok.encode("Héllo, World!", "Second.")
    assert encoding.ids == [101, 7592, 1010, 2088, 999, 102, 2117, 1012, 102]
    assert encoding.type_ids == [0, 0, 0, 0, 0, 0, 1, 1, 1]


def test_bert_base_uncased_matches_transformers(shared_data):
    transformers = pytest.importorskip("transformers")
    path = shared_data / "models" / "bert-base-uncased" / "vocab.txt"
    reference = transformers.BertTokenizer(str(path))  # the Python reference
    tok = load_tokenizer(path)
    for a, b in [
        ("Robert Boulter is an English film, television and theatre actor.", "He had a guest-starring role."),
        ("Ça coûte 3.5 millions d'euros; naïve café!", "[MASK] tokens stay whole."),
        ("John Johanson's house in the U.S. (1999)", "unaffable   tabs\tand  spaces"),
    ]:
        expected = reference(a, b)
        encoding = tok.encode(a, b)
        assert encoding.ids == expected["input_ids"]
        assert encoding.type_ids == expected["token_type_ids"]


def test_bad_tokenizer_file_is_named(tmp_path):
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(DataError, match=f"tokenizer file {bad} does not load"):
        load_or_train_tokenizer(DataConfig(tokenizer=TokenizerConfig(path=str(bad))))
    with pytest.raises(DataError, match=f"tokenizer file {tmp_path / 'none.json'} does not exist"):
        load_tokenizer(tmp_path / "none.json")


def test_vocab_without_special_tokens_is_named(tmp_path):
    vocab_txt = tmp_path / "vocab.txt"
    vocab_txt.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n", encoding="utf-8")
    with pytest.raises(DataError, match=rf"tokenizer file {vocab_txt} has no \[MASK\] or <mask> token"):
        load_tokenizer(vocab_txt)
