"""The SentencePiece-style unigram vocabulary (XLNet): trained by `tokenizers`, cached, or loaded."""

from tokenizers import Tokenizer, models

from plm_toolkit.core.data_schema import TokenizerKind
from plm_toolkit.data.tokenization.pipelines import SPECIAL_TOKENS
from plm_toolkit.data.tokenization.tokenizer import load_or_train_tokenizer, load_tokenizer, vocab_from_tokenizer
from tests.data.tokenization.test_tokenizer import trained_cfg


def test_trained_unigram_vocabulary_and_xlnet_template(tmp_path):
    cfg = trained_cfg(tmp_path, kind=TokenizerKind.unigram, vocab_size=90, lowercase=False)
    tokenizer = load_or_train_tokenizer(cfg)
    assert [tokenizer.token_to_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
    assert 40 < tokenizer.get_vocab_size() <= 90
    encoding = tokenizer.encode("The dog sleeps.", "Cats chase mice.")
    pieces = encoding.tokens
    assert pieces[0].startswith("▁") and "▁" in "".join(pieces)  # SentencePiece marks word starts
    # XLNet's layout: A [SEP] B [SEP] [CLS], CLS last, token types 0 / 1 / 2.
    assert pieces[-1] == "[CLS]" and pieces[-2] == "[SEP]" and pieces.count("[SEP]") == 2
    assert encoding.type_ids[-1] == 2 and encoding.type_ids[0] == 0 and encoding.type_ids[-2] == 1
    assert tokenizer.decode(tokenizer.encode("The dog sleeps.").ids) == "The dog sleeps."
    again = load_or_train_tokenizer(cfg)  # from the cache, identical
    assert (
        again.get_vocab() == tokenizer.get_vocab()
        and again.encode("Cats run.").ids == tokenizer.encode("Cats run.").ids
    )


def test_loads_a_tokenizer_json_with_xlnet_special_names(tmp_path):
    names = ["<unk>", "<s>", "</s>", "<cls>", "<sep>", "<pad>", "<mask>", "▁a", "▁b"]
    tokenizer = Tokenizer(models.Unigram([(n, -1.0) for n in names], unk_id=0))
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    vocab = vocab_from_tokenizer(load_tokenizer(tmp_path / "tokenizer.json"))
    # XLNet's files also hold <s> / </s> (RoBERTa's CLS / SEP); its own <cls> / <sep> win.
    assert (vocab.pad_id, vocab.unk_id, vocab.mask_id, vocab.cls_id, vocab.sep_id) == (5, 0, 6, 3, 4)
