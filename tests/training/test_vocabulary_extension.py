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
