"""data.tokenizer.extend: domain words added to a released vocabulary as whole tokens, their rows started at the
mean of their old pieces' rows or around the old rows' mean (transformers PR #33325), every vocabulary-sized tensor
grown; the export's tokenizer and config hold the extended vocabulary and transformers computes the same loss."""

import pytest
import torch
from tokenizers import Tokenizer

from plm_toolkit.commands.export import export_checkpoint
from plm_toolkit.commands.train import run
from tests.training import released
from tests.training.test_continued_pretraining import TOLERANCE, first_batch, hf_loss, masked

transformers = pytest.importorskip("transformers")
WORDS = ["valkyria", "chronicles", "battlefield"]


@pytest.fixture
def release(tmp_path):
    return released.bert(transformers, tmp_path / "hf")


def test_tokens_from_a_file_start_at_their_pieces_mean(make_config, tmp_path, release):
    (tmp_path / "tokens.txt").write_text("\n".join([*WORDS, "", "the"]) + "\n")  # "the" is known: skipped
    extend = [f"data.tokenizer.extend.tokens_file={tmp_path / 'tokens.txt'}", "data.tokenizer.extend.init=pieces_mean"]
    _, _, model, objective = first_batch(make_config, release, tmp_path / "run", "objective=mlm", *extend)
    old = Tokenizer.from_file(str(release / "tokenizer.json"))
    new = Tokenizer.from_file(str(tmp_path / "run" / "checkpoint_tokenizer.json"))
    assert new.get_vocab_size() == old.get_vocab_size() + 3 == model.input_embeddings.num_embeddings
    reference = transformers.BertForMaskedLM.from_pretrained(release)
    embeddings, bias = reference.bert.embeddings.word_embeddings.weight, reference.cls.predictions.bias
    for word in WORDS:
        (ours,) = new.encode(word, add_special_tokens=False).ids
        pieces = old.encode(word, add_special_tokens=False).ids
        assert len(pieces) > 1
        torch.testing.assert_close(model.input_embeddings.weight[ours], embeddings[pieces].mean(0))
        torch.testing.assert_close(objective.head.bias[ours], bias[pieces].mean(0))
    assert torch.equal(model.input_embeddings.weight[: old.get_vocab_size()], embeddings)


def test_most_split_words_start_around_the_old_mean(make_config, tmp_path, release):
    _, _, model, _ = first_batch(make_config, release, tmp_path / "run", "data.tokenizer.extend.top_words=5")
    old = Tokenizer.from_file(str(release / "tokenizer.json"))
    rows = model.input_embeddings.weight
    known, added = rows[: old.get_vocab_size()], rows[old.get_vocab_size() :]
    assert len(added) == 5
    assert (added - known.mean(0)).abs().max() < 1e-3  # 1e-9 of the covariance: a spread of about 3e-6
    assert not torch.equal(added[0], added[1])  # sampled, not all the mean


def test_spellings_an_uncased_normalizer_merges_are_one_token(make_config, tmp_path, release, caplog):
    """Qwzxyq, QWZXYQ and qwzxyq reach one id of an uncased vocabulary: one token is added, as the normalizer writes
    it, and every spelling encodes to it; a line that normalizes to a known token (The) is skipped; the log says so."""
    (tmp_path / "tokens.txt").write_text("Qwzxyq\nQWZXYQ\nqwzxyq\nValkyria\nThe\n")
    extend = [f"data.tokenizer.extend.tokens_file={tmp_path / 'tokens.txt'}"]
    with caplog.at_level("INFO", logger="plm_toolkit"):
        _, _, model, _ = first_batch(make_config, release, tmp_path / "run", "objective=mlm", *extend)
    old = Tokenizer.from_file(str(release / "tokenizer.json"))
    new = Tokenizer.from_file(str(tmp_path / "run" / "checkpoint_tokenizer.json"))
    assert new.get_vocab_size() == old.get_vocab_size() + 2 == model.input_embeddings.num_embeddings
    added = {token: new.token_to_id(token) for token in ("qwzxyq", "valkyria")}
    assert sorted(added.values()) == [old.get_vocab_size(), old.get_vocab_size() + 1]
    for text in ("Qwzxyq", "QWZXYQ", "qwzxyq"):
        assert new.encode(text, add_special_tokens=False).ids == [added["qwzxyq"]]
    assert (
        "data.tokenizer.extend.tokens_file: the tokenizer's normalizer, which an added token is matched after, "
        "changes or merges 5 line(s): Qwzxyq, QWZXYQ, qwzxyq -> qwzxyq (3 lines, one token); Valkyria -> valkyria; "
        "The -> the (in the vocabulary already)"
    ) in caplog.text
    assert "2 token(s) added (of tokens_file; ids 301-302" in caplog.text


def test_a_tokens_file_and_top_words_are_both_obeyed(make_config, tmp_path, release, caplog):
    """Both given: the file's tokens, then the 5 corpus words the vocabulary splits most besides them."""
    from plm_toolkit.training.vocabulary_extension import corpus_words

    (tmp_path / "tokens.txt").write_text("\n".join(WORDS) + "\n")
    extend = [f"data.tokenizer.extend.tokens_file={tmp_path / 'tokens.txt'}", "data.tokenizer.extend.top_words=5"]
    with caplog.at_level("INFO", logger="plm_toolkit"):
        first_batch(make_config, release, tmp_path / "run", "objective=mlm", *extend)
    old = Tokenizer.from_file(str(release / "tokenizer.json"))
    new = Tokenizer.from_file(str(tmp_path / "run" / "checkpoint_tokenizer.json"))
    cfg = make_config(f"model.checkpoint={release}", tiny=False)
    ranked = corpus_words(old, cfg.data, old.get_vocab(with_added_tokens=True))
    expected = [*WORDS, *[word for word in ranked if word not in WORDS][:5]]
    assert [new.id_to_token(i) for i in range(old.get_vocab_size(), new.get_vocab_size())] == expected
    assert "8 token(s) added (3 of tokens_file, 5 corpus words of top_words=5; ids 301-308" in caplog.text


@pytest.mark.slow
def test_an_extended_run_exports_its_vocabulary(make_config, tmp_path, release):
    (tmp_path / "tokens.txt").write_text("\n".join(WORDS) + "\n")
    given = [f"model.checkpoint={release}", f"data.tokenizer.extend.tokens_file={tmp_path / 'tokens.txt'}"]
    given += ["data.max_seq_len=32", "trainer.batch_size=4", "trainer.max_steps=2"]
    run(make_config(*given, tiny=False), tmp_path / "run", overrides=given)
    export_checkpoint(tmp_path / "run", tmp_path / "out")
    exported = transformers.BertForPreTraining.from_pretrained(tmp_path / "out").eval()
    assert exported.config.vocab_size == 304
    batch, losses, _, _ = first_batch(make_config, tmp_path / "run", tmp_path / "again")
    theirs = hf_loss(
        exported,
        **masked(batch),
        token_type_ids=batch["token_type_ids"],
        next_sentence_label=batch["next_sentence_label"],
    )
    assert abs(losses["mlm"] + losses["nsp"] - theirs) <= TOLERANCE
    text = ["Valkyria Chronicles III is a battlefield game"]
    ours = Tokenizer.from_file(str(tmp_path / "run" / "checkpoint_tokenizer.json")).encode_batch(text)
    auto = transformers.AutoTokenizer.from_pretrained(tmp_path / "out")(text)["input_ids"]
    assert auto == [e.ids for e in ours] and {301, 302, 303} <= set(auto[0])
