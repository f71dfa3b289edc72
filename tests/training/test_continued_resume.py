"""A continued-pretraining run (model.checkpoint=PATH) resumes from its own checkpoint when PATH has moved since it
started: the checkpoint holds every weight, the (extended) tokenizer and the objective's heads, so nothing of PATH
is needed, and the resumed run is the one that would have run with PATH in place."""

import shutil

import pytest
import torch

from plm_toolkit.commands.train import run
from plm_toolkit.core.weights import read_weights
from tests.training import released

transformers = pytest.importorskip("transformers")


@pytest.mark.slow
def test_a_run_whose_starting_checkpoint_moved_resumes_as_if_it_had_not(make_config, tmp_path, caplog):
    release = released.bert(transformers, tmp_path / "hf")
    (tmp_path / "tokens.txt").write_text("valkyria\nchronicles\n")
    given = [f"model.checkpoint={release}", f"data.tokenizer.extend.tokens_file={tmp_path / 'tokens.txt'}",
             "data.max_seq_len=32", "trainer.batch_size=4", "trainer.log_every=1", "trainer.eval_every=0",
             "trainer.progress_bar=false", "trainer.tensorboard=false", "hardware=cpu"]  # fmt: skip
    run(make_config(*given, "trainer.max_steps=2", tiny=False), tmp_path / "kept", overrides=given)
    shutil.copytree(tmp_path / "kept", tmp_path / "moved", symlinks=True)
    longer = [*given, "trainer.max_steps=4"]
    run(make_config(*longer, tiny=False), tmp_path / "kept", overrides=longer)

    shutil.move(release, tmp_path / "elsewhere")
    with caplog.at_level("INFO", logger="plm_toolkit"):
        run(make_config(*longer, tiny=False), tmp_path / "moved", overrides=longer)
    assert (
        f"model.checkpoint={release} is no longer there; the run resumes from its own checkpoint "
        f"{(tmp_path / 'moved' / 'checkpoints' / 'step_2').resolve()}"
    ) in caplog.text
    kept, moved = (read_weights(tmp_path / run_dir / "checkpoints" / "step_4" / "model.safetensors")
                   for run_dir in ("kept", "moved"))  # fmt: skip
    assert kept.keys() == moved.keys() and kept["embeddings.word_embeddings.weight"].shape[0] == 303
    for name in kept:
        torch.testing.assert_close(moved[name], kept[name], rtol=0, atol=0)
