"""Nothing lost, nothing silently wrong: the run directory's lock, what a resume compares, a run extended or rerun,
a torn metrics.jsonl, an evaluation or a save that fails, and Ctrl-C."""

import logging
import os
import resource
import signal
import subprocess
import sys
import time

import pytest
import torch
from hydra import compose, initialize_config_module
from torch import nn

from plm_toolkit.commands.train import run
from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core.errors import CheckpointError, ConfigError
from plm_toolkit.core.run_lock import launch_tag, lock_run_directory, release
from plm_toolkit.core.weights import read_weights
from plm_toolkit.training.logging import MetricsWriter, read_metrics
from plm_toolkit.training.preemption import EXIT_REQUEUE, Interrupted, Preempted, StopSignals
from plm_toolkit.training.resume import changes
from tests.commands.test_train import launch
from tests.training.conftest import TINY, train_records
from tests.training.conftest import read_metrics as read_strictly

HOLDER = (
    "import sys, time; from plm_toolkit.core.run_lock import lock_run_directory; lock_run_directory(sys.argv[1]); "
    "print('held', flush=True); time.sleep(600)"
)


def test_a_second_process_cannot_take_a_locked_run_directory_until_the_holder_dies(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        held = rf"another run is using this directory \(pid {holder.pid} on .+\); wait for it to end, or give"
        with pytest.raises(ConfigError, match=rf"hydra.run.dir={tmp_path}: {held} this run another hydra.run.dir"):
            lock_run_directory(tmp_path)
    finally:
        holder.kill()  # kill -9: the system releases its lock, no stale lock is left
        holder.wait()
    lock_run_directory(tmp_path)
    lock_run_directory(tmp_path)  # this process holds it already: no-op
    assert f"pid {os.getpid()} on" in (tmp_path / ".lock").read_text()
    release(tmp_path)


def test_default_run_directories_are_unique_per_launch(monkeypatch):
    with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
        for command in ("train", "finetune"):
            cfg = compose(command, return_hydra_config=True)
            assert str(cfg.hydra.run.dir).endswith(f"-{os.getpid()}"), cfg.hydra.run.dir
    assert launch_tag() == str(os.getpid())
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job")  # every rank of a torchrun job: its launcher's id
    assert launch_tag() == str(os.getppid())


def test_a_torn_metrics_line_is_dropped_with_a_warning(tmp_path, caplog):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "loss": 2.5}\n[1, 2]\n{"step": 2, "loss": 2.25}\n{"step": 3, "lo')
    assert read_metrics(path) == [{"step": 1, "loss": 2.5}, {"step": 2, "loss": 2.25}]
    assert f"{path}:2: not a complete metrics record" in caplog.text and f"{path}:4:" in caplog.text
    writer = MetricsWriter(tmp_path, tensorboard=False)
    writer.truncate_after(1)
    writer.write({"step": 2, "loss": 1.0})
    assert path.read_text() == '{"step": 1, "loss": 2.5}\n{"step": 2, "loss": 1.0}\n'


def test_what_a_resume_may_change():
    saved = {
        "model": {"name": "bert", "hidden_size": 36, "vocab_size": 600},
        "optimizer": {"lr": 5e-4, "d_model": 36},
        "data": {
            "train_files": ["a"],
            "validation_files": [],
            "num_workers": 0,
            "tokenizer": {"kind": "wordpiece"},
        },
        "trainer": {"max_steps": 10, "batch_size": 8, "grad_accum_steps": 1, "seed": 1},
        "hardware": {"precision": "fp32"},
    }
    run_cfg = {
        "model": {"name": "bert", "hidden_size": 36, "vocab_size": None},  # null: the tokenizer's size
        "optimizer": {"lr": 1e-3, "d_model": 36},
        "data": {"train_files": ["a"], "validation_files": ["v"], "num_workers": 2, "tokenizer": {"kind": "auto"}},
        "trainer": {"max_steps": 20, "batch_size": 4, "grad_accum_steps": 2, "seed": 1, "overwrite": False},
        "hardware": {"precision": "bf16"},
    }  # fmt: skip
    allowed, refused = changes(run_cfg, saved, (1, 1))
    assert allowed == [
        "data.num_workers 0 -> 2",
        "data.validation_files [] -> v",
        "hardware.precision fp32 -> bf16",
        "trainer.batch_size 8 -> 4",  # the global batch stays 8
        "trainer.grad_accum_steps 1 -> 2",
        "trainer.max_steps 10 -> 20",
    ]
    assert refused == ["optimizer.lr 0.0005 -> 0.001"]
    # On two processes, batch 4 x 2 is a global batch of 16: refused.
    assert changes(run_cfg, saved, (1, 2))[1] == [
        "optimizer.lr 0.0005 -> 0.001",
        "trainer.batch_size 8 -> 4",
        "trainer.grad_accum_steps 1 -> 2",
    ]


def test_a_changed_blend_names_the_source_key_and_both_values():
    """A list of sections (data.sources, trainer.phases) is compared key by key: a changed weight is named with its
    source's index and both values, not as two lists cut before the weight; a source's validation files may change
    as data.validation_files may. Two long values that differ in the middle show where."""
    from plm_toolkit.training.resume import contrast

    folder = "/data/corpora/pretraining/2026-11/english/wikipedia/shards"
    source = {"name": "wiki", "files": [f"{folder}/wiki-*.txt"], "weight": 0.7, "validation_files": []}
    saved = {"data": {"sources": [source, {**source, "name": "code", "weight": 0.3}]}}
    changed = [{**source, "validation_files": ["v.txt"]}, {**source, "name": "code", "weight": 0.5}]
    run_cfg = {"data": {"sources": changed}}
    assert changes(run_cfg, saved, (1, 1)) == (
        ["data.sources[0].validation_files [] -> v.txt"],
        ["data.sources[1].weight 0.3 -> 0.5"],
    )
    added = {"data": {"sources": [*run_cfg["data"]["sources"], {**source, "name": "news"}]}}
    assert "data.sources 2 -> 3" in changes(added, saved, (1, 1))[1]
    assert contrast(f"{folder}/wiki-0001.txt", f"{folder}/wiki-0002.txt").endswith(
        "...edia/shards/wiki-0001.txt -> ...edia/shards/wiki-0002.txt"
    )


def lrs(run_dir) -> dict[int, float]:
    return {r["step"]: r["lr"] for r in read_strictly(run_dir) if "lr" in r}


def test_a_changed_recipe_is_refused_unless_accepted_and_then_applies(make_config, tmp_path):
    run(make_config("trainer.max_steps=2", "trainer.save_every=0"), tmp_path)
    with pytest.raises(ConfigError, match=r"in what is trained: optimizer.lr 0.0005 -> 0.001; trainer.seed 1234 -> 9"):
        run(make_config("trainer.max_steps=4", "optimizer.lr=1e-3", "trainer.seed=9"), tmp_path)
    with pytest.raises(CheckpointError, match=r"holds a plm-train model=bert objective=mlm_nsp run; this is "
                       r"plm-train model=gpt2 objective=clm, which cannot resume it"):  # fmt: skip
        run(make_config("trainer.max_steps=4", "model=gpt2", "objective=clm"), tmp_path)
    with pytest.raises(ConfigError, match=r"trainer.max_steps: the run would end at step 1, but .*step_2 is at step 2"):
        run(make_config("trainer.max_steps=1"), tmp_path)
    assert [r["step"] for r in train_records(tmp_path)] == [1, 2]
    run(make_config("trainer.max_steps=4", "optimizer.lr=1e-3", "trainer.resume_changes=accept"), tmp_path)
    # The new peak rate over the new length (linear decay to step 4, no warm-up): step t at 1e-3 * (1 - t / 4).
    assert lrs(tmp_path)[3] == pytest.approx(1e-3 * 0.25)


def test_an_extended_run_decays_to_its_new_end_not_at_zero(make_config, tmp_path):
    # 3 steps, then extended to 6: it used to train steps 4-6 at lr 0 (the old schedule had ended). Now steps 4-6
    # get the rates of a run started with 6 steps.
    run(make_config("trainer.max_steps=6", "trainer.save_every=0"), tmp_path / "planned")
    run(make_config("trainer.max_steps=3", "trainer.save_every=0"), tmp_path / "extended")
    run(make_config("trainer.max_steps=6", "trainer.save_every=0"), tmp_path / "extended")
    planned, extended = lrs(tmp_path / "planned"), lrs(tmp_path / "extended")
    assert [extended[t] for t in (4, 5, 6)] == [planned[t] for t in (4, 5, 6)]
    assert extended[4] == pytest.approx(5e-4 * (1 - 4 / 6)) and extended[5] > 0


def test_a_finished_run_rerun_trains_nothing_and_adds_no_evaluation(make_config, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="plm_toolkit")
    run(make_config("trainer.max_steps=2", "trainer.eval_every=2", "trainer.save_every=0"), tmp_path)
    rows = (tmp_path / "metrics.jsonl").read_text()
    assert run(make_config("trainer.max_steps=2", "trainer.eval_every=2"), tmp_path) == {}
    assert "already finished at step 2 (2 steps): nothing to train" in caplog.text
    assert (tmp_path / "metrics.jsonl").read_text() == rows


def test_a_fresh_start_over_checkpoints_needs_overwrite_which_replaces_them(make_config, tmp_path):
    run(make_config("trainer.max_steps=2", "trainer.save_every=1", "trainer.keep_last=0"), tmp_path)
    with pytest.raises(ConfigError, match=r"trainer.resume=none: .* holds the checkpoints of an earlier run \(newest: "
                       r"step_2\).* trainer.overwrite=true"):  # fmt: skip
        run(make_config("trainer.max_steps=1", "trainer.resume=none"), tmp_path)
    run(make_config("trainer.max_steps=1", "trainer.resume=none", "trainer.overwrite=true"), tmp_path)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["last", "step_1"]
    assert [r["step"] for r in train_records(tmp_path)] == [1]


def test_a_failing_evaluation_saves_its_step_first(make_config, tmp_path, monkeypatch):
    from plm_toolkit.training import loop

    def broken(self, bar=None):
        raise RuntimeError("evaluation broke")

    monkeypatch.setattr(loop.Trainer, "evaluate", broken)
    with pytest.raises(RuntimeError, match="evaluation broke"):
        run(make_config("trainer.max_steps=4", "trainer.eval_every=2", "trainer.save_every=0"), tmp_path)
    assert (tmp_path / "checkpoints" / "last").resolve().name == "step_2"
    assert ckpt.Checkpoint(tmp_path / "checkpoints" / "last").step() == 2


def test_a_save_over_the_file_size_limit_keeps_last_on_the_previous_checkpoint(tmp_path):
    model = nn.Linear(200, 200)  # 160 KB of weights
    state = {"step": 1}
    ckpt.save_checkpoint(tmp_path, 1, model, nn.Module(), state, "model: {}\n", None, keep_last=0)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, hard))  # writes past 100 KB fail with EFBIG
    try:
        with pytest.raises(CheckpointError) as failed:
            ckpt.save_checkpoint(tmp_path, 2, model, nn.Module(), state, "model: {}\n", None, keep_last=0)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    root = tmp_path / "checkpoints"
    assert str(failed.value) == (
        f"{root}: could not save checkpoint step_2 (File too large writing model.safetensors); the half-written copy "
        f"is removed and {root / 'last'} still points to step_1: free space (or raise the file-size limit) and rerun "
        "the command to resume"
    )
    assert sorted(p.name for p in root.iterdir()) == ["last", "step_1"]


def test_ctrl_c_is_held_until_the_step_ends_and_a_second_one_stops_at_once(monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    try:
        with StopSignals() as signals:
            os.kill(os.getpid(), signal.SIGINT)  # no KeyboardInterrupt: the step goes on
            os.kill(os.getpid(), signal.SIGTERM)  # SLURM's further signals change nothing
            assert signals.received == signal.SIGINT
            with pytest.raises(Interrupted, match=r"interrupted again \(Ctrl-C\): stopped at once"):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(1)
        with pytest.raises(Preempted), StopSignals() as signals:
            os.kill(os.getpid(), signal.SIGTERM)
            raise Preempted(signals.received, "step_3")
        # On its way out with the requeue status, the process ignores SIGTERM, even once Python has shut down.
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@pytest.mark.slow
def test_ctrl_c_saves_the_step_and_resume_matches_an_uninterrupted_run(small_corpus, tmp_path):
    args = [*TINY, "data=text_files", f"data.train_files=[{small_corpus['train']}]",
            f"data.cache_dir={small_corpus['cache']}", "trainer.max_steps=60", "trainer.save_every=0"]  # fmt: skip
    straight = launch([*args, f"hydra.run.dir={tmp_path / 'straight'}"], tmp_path)
    assert straight.returncode == 0, straight.stderr[-3000:]

    run_dir = tmp_path / "interrupted"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "plm_toolkit.commands.train", *args, f"hydra.run.dir={run_dir}"]
    log = tmp_path / "interrupted.log"
    with log.open("w") as out:
        process = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and process.poll() is None:
            metrics = run_dir / "metrics.jsonl"
            if metrics.is_file() and len(metrics.read_text().splitlines()) >= 5:
                break
            time.sleep(0.02)
        process.send_signal(signal.SIGINT)
        while "received SIGINT" not in log.read_text() and process.poll() is None:
            time.sleep(0.01)
        while process.poll() is None:  # SLURM-style further SIGTERMs, during the save and after it
            process.send_signal(signal.SIGTERM)
            time.sleep(0.05)
    output = log.read_text()
    assert process.returncode == EXIT_REQUEUE, output[-3000:]
    assert "Traceback" not in output and "rerun the same command to resume (trainer.resume=auto)" in output
    stopped_at = read_strictly(run_dir)[-1]["step"]
    assert 5 <= stopped_at < 60
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["last", f"step_{stopped_at}"]

    resumed = launch([*args, f"hydra.run.dir={run_dir}"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a, b = read_strictly(tmp_path / "straight"), read_strictly(run_dir)
    assert [r["step"] for r in b] == list(range(1, 61))
    assert [r["loss"] for r in a] == [r["loss"] for r in b]
    wa, wb = (read_weights(d / "checkpoints" / "last" / ckpt.MODEL_FILE) for d in (tmp_path / "straight", run_dir))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
