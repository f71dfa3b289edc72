"""End-to-end ELMo (bilm): the loss falls in 60 steps, both directions' perplexities are reported, and resume is
exact with the LSTM states carried across batches."""

import math
import shutil

import pytest
import torch
from omegaconf import OmegaConf

from plm_toolkit.commands.train import run
from tests.training.conftest import read_metrics, train_records

ELMO = [
    "model=elmo",
    "model.char_embedding_size=5",
    "model.filters=[[1,7],[2,9],[3,11]]",
    "model.hidden_size=13",
    "model.cell_size=29",
    "data.max_seq_len=12",
    "data.tokenizer.vocab_size=700",
    "trainer.batch_size=6",
    "trainer.log_every=1",
    "trainer.eval_every=0",
    "trainer.progress_bar=false",
    "trainer.tensorboard=false",
    "hardware=cpu",
    "optimizer.lr=1e-2",
]


@pytest.mark.slow
def test_sixty_steps_loss_falls_and_both_directions_report_perplexity(make_config, tmp_path):
    steps = ["trainer.max_steps=60", "trainer.eval_every=30", "trainer.eval_batches=8", "objective.num_negatives=100"]
    run(make_config(*ELMO, *steps, tiny=False), tmp_path)
    records = read_metrics(tmp_path)
    train = [r for r in records if "lr" in r]
    first, last = sum(r["loss"] for r in train[:5]) / 5, sum(r["loss"] for r in train[-10:]) / 10
    assert last < first - 0.5, (first, last)
    evals = [r for r in records if "eval_loss" in r]
    assert len(evals) == 2 and evals[-1]["eval_bilm_loss"] < evals[0]["eval_bilm_loss"]
    # The full softmax at evaluation: an untrained model sits at ln(softmax words); 60 steps get well below it.
    assert evals[-1]["eval_bilm_loss"] < math.log(700) - 0.5
    for direction in ("forward", "backward"):
        key = f"eval_bilm_{direction}_perplexity"
        assert evals[-1][key] == pytest.approx(math.exp(evals[-1][f"eval_bilm_{direction}_loss"]), rel=1e-6)
    saved = OmegaConf.load(tmp_path / "checkpoints" / "last" / "config.yaml")
    assert saved.objective.softmax_size == 700 and saved.data.tokenizer.kind == "word"


@pytest.mark.slow
def test_resume_with_carried_lstm_states_continues_exactly(make_config, tmp_path):
    common = [
        *ELMO,
        "trainer.save_every=4",
        "optimizer.total_steps=8",
        "trainer.grad_accum_steps=2",
        "objective.num_negatives=50",
    ]
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    run(make_config(*common, "trainer.max_steps=8", tiny=False), straight)
    run(make_config(*common, "trainer.max_steps=4", tiny=False), interrupted)
    state = torch.load(interrupted / "checkpoints" / "step_4" / "trainer_state.pt", weights_only=True)
    carried = state["objective_state"]
    assert len(carried) == 8 and carried["rank0.memory.0"].shape == (6, 13)  # h, c x 2 layers x 2 directions
    assert carried["rank0.memory.1"].shape == (6, 29) and carried["rank0.memory.0"].abs().sum() > 0
    run(make_config(*common, "trainer.max_steps=8", "trainer.resume=auto", tiny=False), interrupted)
    a, b = train_records(straight), train_records(interrupted)
    assert [r["step"] for r in b] == list(range(1, 9))
    assert [r["loss"] for r in a] == [r["loss"] for r in b]
    # The states matter: resuming the same checkpoint without them gives other losses.
    forgetful = tmp_path / "forgetful"
    shutil.copytree(interrupted / "checkpoints" / "step_4", forgetful / "checkpoints" / "step_4")
    state["objective_state"] = {}
    torch.save(state, forgetful / "checkpoints" / "step_4" / "trainer_state.pt")
    run(make_config(*common, "trainer.max_steps=5", "trainer.resume=auto", tiny=False), forgetful)
    assert train_records(forgetful)[-1]["loss"] != b[4]["loss"]


def test_impossible_elmo_combinations_name_the_keys(make_config):
    from plm_toolkit.config.validate import validate
    from plm_toolkit.core.errors import ConfigError

    with pytest.raises(ConfigError, match="model=elmo reads words as characters; objective=mlm feeds token ids"):
        validate(make_config(*ELMO, "objective=mlm", tiny=False))
    with pytest.raises(ConfigError, match="data.tokenizer.kind=wordpiece: objective=bilm predicts whole words"):
        validate(make_config(*ELMO, "data.tokenizer.kind=wordpiece", tiny=False))
    with pytest.raises(ConfigError, match="objective=bilm needs a model that is characters, recurrent_memory"):
        validate(make_config("objective=bilm", "data.tokenizer.kind=word"))
    with pytest.raises(ConfigError, match="data.packing=streams: objective=bilm needs sentence streams"):
        validate(make_config(*ELMO, "data.packing=streams", tiny=False))
