"""A continued run is a run like any other: it resumes exactly, continues again from its own checkpoint, and its
plm-export loads in transformers to the same loss, its tokenizer giving the same ids through AutoTokenizer."""

import pytest
from tokenizers import Tokenizer

from plm_toolkit.commands.export import export_checkpoint
from plm_toolkit.commands.train import run
from tests.training import released
from tests.training.conftest import read_metrics
from tests.training.test_continued_pretraining import TOLERANCE, first_batch, hf_loss, masked

transformers = pytest.importorskip("transformers")
STEPS = ["data.max_seq_len=32", "trainer.batch_size=4", "optimizer.total_steps=4", "trainer.save_every=2"]


@pytest.mark.slow
def test_continued_run_resumes_exactly(make_config, tmp_path):
    folder = released.bert(transformers, tmp_path / "hf")
    given = [f"model.checkpoint={folder}", "objective=mlm", *STEPS]
    run(make_config(*given, "trainer.max_steps=4", tiny=False), tmp_path / "straight", overrides=given)
    run(make_config(*given, "trainer.max_steps=2", tiny=False), tmp_path / "resumed", overrides=given)
    again = [*given, "trainer.resume=auto"]
    run(make_config(*again, "trainer.max_steps=4", tiny=False), tmp_path / "resumed", overrides=again)
    straight, resumed = ([r for r in read_metrics(tmp_path / name) if "loss" in r] for name in ("straight", "resumed"))
    assert [r["step"] for r in resumed] == [1, 2, 3, 4]
    assert [r["loss"] for r in straight] == [r["loss"] for r in resumed]


@pytest.mark.slow
def test_continued_run_exports_to_transformers(make_config, tmp_path):
    folder = released.bert(transformers, tmp_path / "hf")
    given = [f"model.checkpoint={folder}", *STEPS, "trainer.max_steps=3"]
    run(make_config(*given, tiny=False), tmp_path / "run", overrides=given)
    export_checkpoint(tmp_path / "run", tmp_path / "out")
    # The continued weights, as a plm-train checkpoint that a run continues from, against transformers' export.
    batch, losses, _, _ = first_batch(make_config, tmp_path / "run", tmp_path / "again")
    exported = transformers.BertForPreTraining.from_pretrained(tmp_path / "out").eval()
    theirs = hf_loss(
        exported,
        **masked(batch),
        token_type_ids=batch["token_type_ids"],
        next_sentence_label=batch["next_sentence_label"],
    )
    assert abs(losses["mlm"] + losses["nsp"] - theirs) <= TOLERANCE
    released_weights = transformers.BertForPreTraining.from_pretrained(folder)
    moved = (
        exported.bert.encoder.layer[0].output.dense.weight - released_weights.bert.encoder.layer[0].output.dense.weight
    )
    assert moved.abs().max() > 0  # trained further, not the release again
    texts = ["The continued run's tokenizer.", "Valkyria Chronicles III, a tactical role-playing game"]
    ours = Tokenizer.from_file(str(folder / "tokenizer.json"))
    auto = transformers.AutoTokenizer.from_pretrained(tmp_path / "out")
    assert auto(texts)["input_ids"] == [encoding.ids for encoding in ours.encode_batch(texts)]
