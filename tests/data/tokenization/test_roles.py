"""Vocabulary roles without BERT's tokens: GPT-2's byte-level BPE, T5-style sentinels, templates in the packers."""

import json

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from plm_toolkit.core.errors import DataError
from plm_toolkit.data.batching.collate import Collator
from plm_toolkit.data.build import prepare_pretraining_data
from plm_toolkit.data.layouts.registry import build_pretraining_examples
from plm_toolkit.data.tokenization.template import template_of
from plm_toolkit.data.tokenization.tokenizer import load_or_train_tokenizer, load_tokenizer, vocab_from_tokenizer
from plm_toolkit.data.tokenization.vocab import Vocab
from tests.data.layouts.test_encoder_data import bpe_cfg


def gpt2_cfg(tmp_path):
    cfg = bpe_cfg(tmp_path)
    cfg.tokenizer.kind = "gpt2_bpe"
    return cfg


def test_trained_gpt2_vocabulary_has_end_of_text_alone(tmp_path):
    tok = load_or_train_tokenizer(gpt2_cfg(tmp_path))
    vocab = vocab_from_tokenizer(tok)
    end = tok.token_to_id("<|endoftext|>")
    assert (vocab.bos_id, vocab.eos_id, vocab.unk_id) == (end, end, end)
    assert vocab.pad_id is vocab.cls_id is vocab.sep_id is vocab.mask_id is None
    assert vocab.padding_id == end and vocab.document_separator == end and vocab.special_ids == (end,)
    assert tok.encode("The dog sleeps.").tokens[-1] == "<|endoftext|>"  # the template: A <|endoftext|>
    assert template_of(tok, pair=True).num_special == 2
    with pytest.raises(DataError, match=r"no \[MASK\] or <mask> token; masked language modeling needs one"):
        vocab.require("mask_id", "masked language modeling")


def test_gpt2_vocab_json_loads_like_gpt2_tokenizer(tmp_path):
    tok = load_or_train_tokenizer(gpt2_cfg(tmp_path))
    model = json.loads(tok.to_str())["model"]
    (tmp_path / "vocab.json").write_text(json.dumps(model["vocab"]))
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    (tmp_path / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    loaded = load_tokenizer(tmp_path / "vocab.json")  # no [CLS] anywhere: loads all the same
    vocab = vocab_from_tokenizer(loaded)
    assert vocab.eos_id == loaded.token_to_id("<|endoftext|>") and vocab.cls_id is None
    # GPT2Tokenizer adds no space before a text: "The" and " The" are different pieces.
    assert loaded.encode("The", add_special_tokens=False).tokens == ["The"]
    assert loaded.encode("a <|endoftext|>", add_special_tokens=False).ids[-1] == vocab.eos_id


def test_streams_join_documents_with_end_of_text_and_full_sentences_follow_the_template(tmp_path):
    cfg = gpt2_cfg(tmp_path)
    data = prepare_pretraining_data(cfg, "streams", seed=0, window=(25, 24))
    end = data.vocab.eos_id
    stream = [t for row in data.train["input_ids"] for t in row[:24]]
    assert end in stream and data.tokenizer.token_to_id("[SEP]") is None
    blocks = build_pretraining_examples(cfg, data.tokenizer, data.vocab, "full_sentences", "train", 0)
    first = blocks[0]["input_ids"]
    assert first[-1] == end and first[0] != end and len(first) <= 24  # A <|endoftext|>, no [CLS]
    batch = Collator(data.vocab)([{"input_ids": first}, {"input_ids": first[:5]}])
    assert batch["input_ids"][1, 5:].eq(end).all() and batch["attention_mask"][1, 5:].eq(0).all()
    assert batch["special_tokens_mask"][0, -1]


def test_t5_style_tokenizer_gives_sentinels_and_no_cls(tmp_path):
    tokens = ["<pad>", "</s>", "<unk>", "▁a", "▁b", *[f"<extra_id_{i}>" for i in range(3)]]
    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(tokens)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.add_special_tokens(["<pad>", "</s>", "<unk>", *tokens[5:]])
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    vocab = vocab_from_tokenizer(load_tokenizer(path))
    assert (vocab.pad_id, vocab.eos_id, vocab.unk_id, vocab.cls_id, vocab.mask_id) == (0, 1, 2, None, None)
    assert vocab.sentinel_ids == (5, 6, 7) and set(vocab.special_ids) == {0, 1, 2, 5, 6, 7}


def test_bert_vocab_has_no_bos_or_eos_and_keeps_its_separator():
    vocab = Vocab(30522, 0, 100, 101, 102, 103)
    assert vocab.document_separator == 102 and vocab.special_ids == (0, 100, 101, 102, 103)
