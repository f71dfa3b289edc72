"""The same text and settings give the same vocabulary, byte for byte (data/tokenization/reproducible_training.py):
the tokenizers library's WordPiece and unigram trainers alone give another one on most runs (hash-map order, as in
huggingface/tokenizers#1794), which made `make demo` train from other ids on every machine."""

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from tokenizers import Tokenizer, models, trainers

from plm_toolkit.core.resources import resource_path
from plm_toolkit.data.tokenization.pipelines import SPECIAL_TOKENS, bert_tokenizer
from plm_toolkit.data.tokenization.reproducible_training import canonical_unigram
from plm_toolkit.data.tokenization.vocabulary_training import train_on_texts

# About 200 KB of the bundled WikiText: enough ties between equal counts for the library's trainers to differ.
TEXTS = Path(resource_path("corpora/wikitext2/train.txt")).read_text(encoding="utf-8")[:200_000].split("\n\n")


def trained(kind: str, size: int = 2000) -> str:
    cfg = OmegaConf.create({"tokenizer": {"kind": kind, "vocab_size": size, "min_frequency": 2, "lowercase": None}})
    return train_on_texts(cfg, lambda: iter(TEXTS)).to_str()


@pytest.mark.parametrize("kind", ["wordpiece", "unigram", "t5_unigram"])
def test_three_trainings_give_the_same_tokenizer_byte_for_byte(kind):
    first = trained(kind)
    assert trained(kind) == first and trained(kind) == first


def test_wordpiece_symbols_are_ordinary_pieces_and_the_vocabulary_is_the_trainers():
    """The `##` symbols handed to the trainer first are plain vocabulary entries afterwards (never split off the
    text), and the vocabulary has the size and the pieces of the library's own training up to its ties."""
    ours = Tokenizer.from_str(trained("wordpiece"))
    assert [token.content for token in ours.get_added_tokens_decoder().values()] == list(SPECIAL_TOKENS)
    assert ours.get_vocab_size() == 2000
    typed = ours.encode("the ##e").tokens  # "##e" typed is text, split as text: not the symbol
    assert "##e" not in typed and typed[-2] == "e" and "##e" in ours.get_vocab()
    theirs = bert_tokenizer(models.WordPiece(unk_token="[UNK]"), True)
    trainer = trainers.WordPieceTrainer(vocab_size=2000, min_frequency=2, special_tokens=list(SPECIAL_TOKENS),
                                        continuing_subword_prefix="##", show_progress=False)  # fmt: skip
    theirs.train_from_iterator(TEXTS, trainer=trainer)
    assert theirs.get_vocab_size() == 2000
    assert len(set(ours.get_vocab()) ^ set(theirs.get_vocab())) <= 40  # the same pieces but for a few ties


def test_canonical_unigram_orders_ties_and_the_appended_characters():
    """Pieces of equal rounded score sorted by the piece; the characters appended last take the tail's scores in
    the characters' order; the special tokens stay first."""
    spec = json.loads(Tokenizer(models.Unigram([("[UNK]", 0.0), ("ab", -1.0)], unk_id=0)).to_str())
    spec["model"]["vocab"] = [["[UNK]", 0.0], ["b", -2.000000000000001], ["a", -2.0], ["zz", -1.0],
                              ["y", -5.0], ["x", -5.0001], ["w", -5.0002]]  # fmt: skip
    canonical = json.loads(canonical_unigram(Tokenizer.from_str(json.dumps(spec)), 1).to_str())["model"]["vocab"]
    assert canonical == [["[UNK]", 0.0], ["zz", -1.0], ["a", -2.0], ["b", -2.0], ["w", -5.0], ["x", -5.0001],
                         ["y", -5.0002]]  # fmt: skip
