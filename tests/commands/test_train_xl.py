"""End-to-end Transformer-XL (clm) and XLNet (plm) runs: loss falls; resume is exact with segment memories."""

import math

import pytest
import torch
from omegaconf import OmegaConf

from plm_toolkit.commands.train import run
from tests.training.conftest import read_metrics, train_records

XL = {
    "transformer_xl": [
        "model=transformer_xl_tiny",
        "model.hidden_size=36",
        "model.num_heads=3",
        "model.head_size=11",
        "model.intermediate_size=37",
        "model.mem_len=24",
        "data.max_seq_len=24",
    ],
    "xlnet": [
        "model=xlnet_tiny",
        "model.hidden_size=36",
        "model.num_heads=3",
        "model.head_size=11",
        "model.intermediate_size=37",
        "model.mem_len=16",
        "data.max_seq_len=32",
        "objective.reuse_len=16",
        "objective.perm_size=8",
    ],
}
COMMON = [
    "data.tokenizer.vocab_size=600",
    "trainer.batch_size=6",
    "trainer.log_every=1",
    "trainer.eval_every=0",
    "trainer.progress_bar=false",
    "trainer.tensorboard=false",
    "hardware=cpu",
    "optimizer.lr=1e-2",
]


@pytest.mark.slow
@pytest.mark.parametrize("family", ["transformer_xl", "xlnet"])
def test_few_steps_loss_falls_and_evaluation_reports_perplexity(family, make_config, tmp_path):
    steps = ["trainer.max_steps=40", "trainer.eval_every=10", "trainer.eval_batches=6"]
    final = run(make_config(*XL[family], *COMMON, *steps, tiny=False), tmp_path)
    records = read_metrics(tmp_path)
    train = [r for r in records if "lr" in r]
    first, last = sum(r["loss"] for r in train[:3]) / 3, sum(r["loss"] for r in train[-8:]) / 8
    assert last < first - 0.1, (family, first, last)
    # Evaluation reads the same validation windows every time, from an empty memory: the steadier measure. The
    # untrained model sits at the uniform loss ln(V); 40 steps get well below it.
    uniform = math.log(OmegaConf.load(tmp_path / "checkpoints" / "last" / "config.yaml").model.vocab_size)
    component = "clm" if family == "transformer_xl" else "plm"
    evals = [r[f"eval_{component}_loss"] for r in records if "eval_loss" in r]
    assert len(evals) == 4 and evals[-1] < evals[0] and evals[-1] < uniform - 0.3, (family, uniform, evals)
    if family == "transformer_xl":
        assert abs(final["eval_clm_bits_per_token"] - final["eval_clm_loss"] / torch.log(torch.tensor(2.0))) < 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("family", ["transformer_xl", "xlnet"])
def test_resume_with_memories_continues_exactly(family, make_config, tmp_path):
    common = [*XL[family], *COMMON, "trainer.save_every=4", "optimizer.total_steps=8", "trainer.grad_accum_steps=2"]
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    run(make_config(*common, "trainer.max_steps=8", tiny=False), straight)
    run(make_config(*common, "trainer.max_steps=4", tiny=False), interrupted)
    state = torch.load(interrupted / "checkpoints" / "step_4" / "trainer_state.pt", weights_only=True)
    memory = state["objective_state"]["rank0.memory.0"]
    assert memory.shape[:2] == (6, 24 if family == "transformer_xl" else 16) and memory.abs().sum() > 0
    run(make_config(*common, "trainer.max_steps=8", "trainer.resume=auto", tiny=False), interrupted)
    a, b = train_records(straight), train_records(interrupted)
    assert [r["step"] for r in b] == list(range(1, 9))
    assert [r["loss"] for r in a] == [r["loss"] for r in b]


@pytest.mark.slow
def test_character_level_tinyshakespeare_reports_bits_per_character(shared_data, tmp_path):
    from hydra import compose, initialize_config_module

    text = (shared_data / "tinyshakespeare" / "input.txt").read_text()
    (tmp_path / "train.txt").write_text(text[:60000])
    (tmp_path / "valid.txt").write_text(text[60000:66000])
    overrides = [
        *XL["transformer_xl"],
        *COMMON,
        "data=text_files",
        f"data.train_files=[{tmp_path / 'train.txt'}]",
        f"data.validation_files=[{tmp_path / 'valid.txt'}]",
        f"data.cache_dir={tmp_path / 'cache'}",
        "data.tokenizer.kind=character",
        "data.tokenizer.lowercase=false",
        "data.tokenizer.vocab_size=100",
        "data.max_seq_len=48",
        "model.mem_len=48",
        "trainer.max_steps=40",
        "trainer.eval_every=40",
        "trainer.eval_batches=4",
    ]
    with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    final = run(cfg, tmp_path / "run")
    # 62 distinct characters: uniform is 5.95 bits; the character frequencies alone are worth ~4.4 bits, which a
    # few steps get close to.
    vocab_size = OmegaConf.load(tmp_path / "run" / "checkpoints" / "last" / "config.yaml").model.vocab_size
    assert vocab_size < 80
    assert final["eval_clm_bits_per_token"] < 4.8, final
    assert abs(final["eval_clm_bits_per_token"] - final["eval_clm_loss"] / math.log(2)) < 1e-4


@pytest.mark.distributed
@pytest.mark.slow
def test_two_process_resume_restores_each_ranks_memories(small_corpus, tmp_path):
    from tests.commands.test_train import launch

    args = [
        *XL["transformer_xl"],
        *COMMON,
        "data=text_files",
        f"data.train_files=[{small_corpus['train']}]",
        f"data.cache_dir={small_corpus['cache']}",
        "trainer.batch_size=3",
        "trainer.save_every=3",
        "optimizer.total_steps=6",
    ]
    straight = launch([*args, "trainer.max_steps=6", f"hydra.run.dir={tmp_path / 'a'}"], tmp_path, nproc=2)
    assert straight.returncode == 0, straight.stderr[-3000:]
    first = launch([*args, "trainer.max_steps=3", f"hydra.run.dir={tmp_path / 'b'}"], tmp_path, nproc=2)
    assert first.returncode == 0, first.stderr[-3000:]
    state = torch.load(tmp_path / "b" / "checkpoints" / "step_3" / "trainer_state.pt", weights_only=True)
    rank0, rank1 = state["objective_state"]["rank0.memory.0"], state["objective_state"]["rank1.memory.0"]
    assert rank0.shape == rank1.shape == (3, 24, 36) and not torch.equal(rank0, rank1)
    resumed = launch([*args, "trainer.max_steps=6", f"hydra.run.dir={tmp_path / 'b'}"], tmp_path, nproc=2)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a, b = read_metrics(tmp_path / "a"), read_metrics(tmp_path / "b")
    assert [r["step"] for r in b] == list(range(1, 7))
    assert [r["loss"] for r in a] == [r["loss"] for r in b]
