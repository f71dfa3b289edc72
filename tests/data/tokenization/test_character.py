"""The character-level vocabulary (bits per token of the clm objective are then bits per character)."""

from plm_toolkit.core.data_schema import TokenizerKind
from plm_toolkit.data.tokenization.pipelines import SPECIAL_TOKENS
from plm_toolkit.data.tokenization.tokenizer import load_or_train_tokenizer
from tests.data.tokenization.test_tokenizer import trained_cfg


def test_one_token_per_character(tmp_path):
    tokenizer = load_or_train_tokenizer(trained_cfg(tmp_path, kind=TokenizerKind.character, lowercase=False))
    assert [tokenizer.token_to_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
    encoding = tokenizer.encode("The cat.", add_special_tokens=False)
    assert encoding.tokens == list("The cat.")
    assert tokenizer.encode("Z", add_special_tokens=False).tokens == ["[UNK]"]  # an unseen character
    assert tokenizer.decode(encoding.ids) == "The cat."
    small = load_or_train_tokenizer(trained_cfg(tmp_path, kind=TokenizerKind.character, vocab_size=12))
    assert small.get_vocab_size() == 12  # the 7 most frequent characters after the 5 special tokens
