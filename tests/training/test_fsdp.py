"""FSDP2 over gloo on CPU processes: the same losses and gradients as one process, sharded checkpoints that resume
bit-exactly (also onto another number of processes), and clear errors for incomplete or mismatched ones."""

import math
import shutil

import pytest
import torch
import torch.distributed as dist
from safetensors.torch import load_file
from torch import nn

from plm_toolkit.commands.train import run
from plm_toolkit.core.errors import CheckpointError, ConfigError
from plm_toolkit.training.parallel import check_shardable, shard_units
from plm_toolkit.training.sharded import consolidate
from tests.commands.test_train import launch
from tests.training.conftest import TINY, read_metrics, train_records

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")


def common_args(corpus) -> list[str]:
    return [
        *TINY,
        "data=text_files",
        f"data.train_files=[{corpus['train']}]",
        f"data.cache_dir={corpus['cache']}",
        "model.hidden_dropout=0",
        "model.attention_dropout=0",
        "trainer.max_steps=6",
        "trainer.save_every=3",
        "optimizer.total_steps=6",
    ]


@pytest.fixture(scope="module")
def fsdp_runs(small_corpus, tmp_path_factory):
    """One plain process at batch 8, and 2 FSDP processes at 4 each (the same global batch); the FSDP run is
    then resumed from its step-3 checkpoint in a fresh directory by 2 processes."""
    root = tmp_path_factory.mktemp("fsdp")
    args = common_args(small_corpus)
    one = launch([*args, "trainer.batch_size=8", f"hydra.run.dir={root / 'one'}"], root)
    assert one.returncode == 0, one.stderr[-3000:]
    fsdp = [*args, "trainer.batch_size=4", "hardware.distributed=fsdp"]
    two = launch([*fsdp, f"hydra.run.dir={root / 'two'}"], root, nproc=2)
    assert two.returncode == 0, two.stderr[-3000:]
    resumed = root / "resumed"
    step3 = root / "two" / "checkpoints" / "step_3"
    again = launch([*fsdp, f"trainer.resume={step3}", f"hydra.run.dir={resumed}"], root, nproc=2)
    assert again.returncode == 0, again.stderr[-3000:]
    return root


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.parametrize(("distributed", "batches"), [("fsdp", 3), ("ddp", 1)])
def test_evaluation_with_more_batches_on_one_process_than_the_other(small_corpus, tmp_path, distributed, batches):
    """Validation batches dealt out to two processes unevenly (fsdp: 2 and 1; ddp: 1 and none). A forward can be a
    collective (FSDP gathers the blocks, DDP broadcasts buffers), so the process with fewer batches must keep pace,
    and the sums over both are one process's evaluation of the same batches."""
    args = [
        *common_args(small_corpus),
        f"data.validation_files=[{small_corpus['valid']}]",
        "trainer.max_steps=2",
        "optimizer.total_steps=2",
        "trainer.eval_every=1",
        f"trainer.eval_batches={batches}",
        "trainer.batch_size=4",
    ]
    one = launch([*args, "trainer.grad_accum_steps=2", f"hydra.run.dir={tmp_path / 'one'}"], tmp_path)
    assert one.returncode == 0, one.stderr[-3000:]
    two = [*args, f"hardware.distributed={distributed}", f"hydra.run.dir={tmp_path / 'two'}"]
    two = launch(two, tmp_path, nproc=2, timeout=240)
    assert two.returncode == 0, two.stderr[-3000:]
    evals = [[r for r in read_metrics(tmp_path / run) if "eval_loss" in r] for run in ("one", "two")]
    assert [r["step"] for r in evals[1]] == [1, 2]
    for a, b in zip(*evals, strict=True):
        assert abs(a["eval_loss"] - b["eval_loss"]) < 1e-5 and a["eval_mlm_accuracy"] == b["eval_mlm_accuracy"]


@pytest.fixture
def one_process_group():
    """In-process runs with hardware.distributed=fsdp join a one-process group; leave it afterwards."""
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


@pytest.mark.distributed
@pytest.mark.slow
def test_two_fsdp_processes_match_one_process(fsdp_runs):
    a, b = train_records(fsdp_runs / "one"), train_records(fsdp_runs / "two")
    assert [r["step"] for r in b] == list(range(1, 7))
    assert max(abs(x["loss"] - y["loss"]) for x, y in zip(a, b, strict=True)) < 1e-5
    # The global gradient norm of every step: the gradients agree, not only the losses.
    assert max(abs(x["grad_norm"] - y["grad_norm"]) for x, y in zip(a, b, strict=True)) < 1e-5
    wa = load_file(fsdp_runs / "one" / "checkpoints" / "step_6" / "model.safetensors")
    wb = load_file(fsdp_runs / "two" / "checkpoints" / "step_6" / "model.safetensors")  # gathered at the end
    assert wa.keys() == wb.keys()
    assert max((wa[k] - wb[k]).abs().max().item() for k in wa) < 1e-5


@pytest.mark.distributed
@pytest.mark.slow
def test_sharded_checkpoint_has_one_file_per_rank_and_resumes_bit_exactly(fsdp_runs):
    step3 = fsdp_runs / "two" / "checkpoints" / "step_3"
    assert sorted(p.name for p in (step3 / "sharded").iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    assert not (step3 / "model.safetensors").exists()  # only the final checkpoint is gathered
    straight = {r["step"]: r["loss"] for r in train_records(fsdp_runs / "two")}
    resumed = {r["step"]: r["loss"] for r in train_records(fsdp_runs / "resumed")}
    assert sorted(resumed) == [4, 5, 6]
    assert all(resumed[s] == straight[s] for s in resumed)


@pytest.mark.distributed
@pytest.mark.slow
def test_sharded_checkpoint_resumes_onto_one_process_and_consolidates(fsdp_runs, make_config, tmp_path):
    shutil.copytree(fsdp_runs / "two" / "checkpoints" / "step_3", tmp_path / "step_3")
    cfg = make_config(*common_args_overrides(), "trainer.batch_size=8", f"trainer.resume={tmp_path / 'step_3'}")
    run(cfg, tmp_path / "single")  # plain single process: DCP loads the shards into whole tensors
    straight = {r["step"]: r["loss"] for r in train_records(fsdp_runs / "two")}
    single = {r["step"]: r["loss"] for r in train_records(tmp_path / "single")}
    assert sorted(single) == [4, 5, 6]
    assert max(abs(single[s] - straight[s]) for s in single) < 1e-5
    # Consolidation in one process gives the weights the run gathered at its end.
    final = tmp_path / "step_6"
    shutil.copytree(fsdp_runs / "two" / "checkpoints" / "step_6", final)
    gathered = load_file(final / "model.safetensors")
    (final / "model.safetensors").unlink()
    consolidate(final)
    rebuilt = load_file(final / "model.safetensors")
    assert rebuilt.keys() == gathered.keys() and all(torch.equal(rebuilt[k], gathered[k]) for k in gathered)


def common_args_overrides() -> list[str]:
    return ["model.hidden_dropout=0", "model.attention_dropout=0", "trainer.max_steps=6", "optimizer.total_steps=6"]


@pytest.mark.distributed
@pytest.mark.slow
def test_missing_shard_and_other_model_config_are_named(fsdp_runs, make_config, tmp_path, one_process_group):
    broken = tmp_path / "broken"
    shutil.copytree(fsdp_runs / "two" / "checkpoints" / "step_3", broken)
    (broken / "sharded" / "__1_0.distcp").unlink()
    cfg = make_config(*common_args_overrides(), "hardware.distributed=fsdp", f"trainer.resume={broken}")
    with pytest.raises(CheckpointError, match=r"__1_0\.distcp missing \(written by rank\(s\) 1 of 2\)"):
        run(cfg, tmp_path / "a")
    whole = fsdp_runs / "two" / "checkpoints" / "step_3"
    # Accepted as a change of recipe, so that it reaches the shards (a changed model.* is refused before)
    cfg = make_config(
        *common_args_overrides(),
        "model.intermediate_size=41",
        "trainer.resume_changes=accept",
        f"trainer.resume={whole}",
    )
    with pytest.raises(CheckpointError, match=r"different model config .*intermediate.* vs expected \(41, 36\)"):
        run(cfg, tmp_path / "b")


def test_fsdp_on_one_process_without_a_launcher(make_config, tmp_path, one_process_group):
    final = run(make_config("trainer.max_steps=2", "hardware.distributed=fsdp"), tmp_path)
    assert final["step"] == 2
    last = tmp_path / "checkpoints" / "last"
    assert (last / "sharded" / ".metadata").is_file() and (last / "model.safetensors").is_file()


@pytest.mark.gpu
@pytest.mark.parametrize("objective", ["mlm_nsp", "mlm"])
def test_fsdp_on_cuda_in_bf16_uses_root_parameters_in_backward(make_config, tmp_path, one_process_group, objective):
    """The heads and the tied decoder live in the root unit and are read again in backward: a root resharded after
    forward failed there with "setStorage ... storage of size 0" (seen on an H100)."""
    overrides = ["hardware=cuda_bf16", "hardware.distributed=fsdp", "hardware.reshard_after_forward=true"]
    final = run(make_config(*overrides, f"objective={objective}", "trainer.max_steps=3"), tmp_path)
    assert final["step"] == 3
    assert all(math.isfinite(r["loss"]) for r in read_metrics(tmp_path) if "lr" in r)


def test_blocks_are_units_and_scalar_parameters_are_refused():
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(5, 4)
            self.layers = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])
            shared = nn.Linear(4, 4)
            self.tied = nn.ModuleList([shared, nn.Sequential(shared)])  # shares parameters: stays in the root

    model = Model()
    assert [id(u) for u in shard_units(model)] == [id(model.layers[0]), id(model.layers[1])]
    check_shardable(model)
    model.scale = nn.Parameter(torch.tensor(1.0))
    with pytest.raises(ConfigError, match="cannot shard the 0-dimensional parameter.*scale.*distributed=ddp"):
        check_shardable(model)
