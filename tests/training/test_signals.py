"""Signals are obeyed within trainer.signal_grace seconds in any phase: work that changes nothing a checkpoint holds
(reading data, a step's forward and backward, compiling them, an evaluation) is dropped once the grace has passed,
or at once when no step has completed since the last checkpoint; an update or a save is always finished. Through
the real command: SIGTERM during compilation ends the run within 30 s with the requeue status and the last
checkpoint untouched; SIGTERM during a long evaluation saves the completed step, and the resumed run ends where an
uninterrupted one does."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from plm_toolkit.training.preemption import EXIT_REQUEUE, StepAbandoned, StopSignals
from tests.commands.test_train import launch
from tests.conftest import tree_digest
from tests.training.conftest import TINY, read_metrics


def busy(seconds: float) -> None:
    """Python work (the main thread runs signal handlers between its bytecodes, as during compilation)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sum(range(100))


def test_abandonable_work_is_dropped_once_the_grace_has_passed():
    with StopSignals(grace=0.3) as signals:
        started = time.monotonic()
        with pytest.raises(StepAbandoned, match=r"step 7 abandoned 0 s after SIGTERM"), signals.abandonable("step 7"):
            os.kill(os.getpid(), signal.SIGTERM)
            busy(5.0)
        waited = time.monotonic() - started
    assert signals.received == signal.SIGTERM and 0.25 <= waited < 2.0


def test_with_nothing_to_save_the_work_is_dropped_at_once():
    with StopSignals(grace=60, nothing_to_save=lambda: True) as signals:
        started = time.monotonic()
        with pytest.raises(StepAbandoned) as dropped, signals.abandonable("step 1"):
            os.kill(os.getpid(), signal.SIGUSR1)
            busy(5.0)
    assert dropped.value.signum == signal.SIGUSR1 and time.monotonic() - started < 1.0


def test_an_update_or_a_save_is_finished_and_the_next_work_is_dropped_on_entry():
    finished = False
    with StopSignals(grace=0.2) as signals:
        os.kill(os.getpid(), signal.SIGTERM)
        busy(0.6)  # an optimizer update (not abandonable) that outlasts the grace
        finished = True
        work = "the evaluation at step 3"
        with pytest.raises(StepAbandoned, match=work), signals.abandonable(work):
            busy(5.0)
    assert finished


def test_work_that_ends_within_the_grace_is_kept():
    with StopSignals(grace=5.0) as signals, signals.abandonable("step 2"):
        os.kill(os.getpid(), signal.SIGUSR1)
        busy(0.2)
    assert signals.received == signal.SIGUSR1  # the loop then saves and stops (training/loop.py)


def tiny_args(corpus, run_dir: Path, *extra: str) -> list[str]:
    return [
        *TINY,
        "data=text_files",
        f"data.train_files=[{corpus['train']}]",
        f"data.cache_dir={corpus['cache']}",
        f"hydra.run.dir={run_dir}",
        "model.hidden_dropout=0",
        "model.attention_dropout=0",
        *extra,
    ]


def start(args: list[str], cwd: Path, **env: str) -> subprocess.Popen:
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **env}
    command = [sys.executable, "-m", "plm_toolkit.commands.train", *args]
    return subprocess.Popen(command, cwd=cwd, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def signal_when(process: subprocess.Popen, line: str, delay: float, timeout: float = 240) -> tuple[str, float]:
    """Send SIGTERM ``delay`` seconds after ``line`` appears in the output; (the whole output, seconds from the
    signal to the exit)."""
    output, deadline = b"", time.monotonic() + timeout
    while line.encode() not in output and time.monotonic() < deadline and process.poll() is None:
        output += process.stdout.readline()
    time.sleep(delay)
    process.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    rest, _ = process.communicate(timeout=120)
    return (output + rest).decode(), time.monotonic() - sent


@pytest.mark.slow
def test_sigterm_during_compilation_stops_within_30_s_and_keeps_the_last_checkpoint(small_corpus, tmp_path):
    run_dir = tmp_path / "run"
    first = launch(tiny_args(small_corpus, run_dir, "trainer.max_steps=3"), tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    before = tree_digest(run_dir / "checkpoints")
    # A cold compile cache: compiling the step takes minutes on a CPU, and the signal comes in the middle of it.
    args = tiny_args(small_corpus, run_dir, "trainer.max_steps=6", "hardware.compile=true")
    process = start(args, tmp_path, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"))
    output, took = signal_when(process, "resumed from", delay=3.0)
    assert process.returncode == EXIT_REQUEUE, output[-3000:]
    assert took < 30, output[-3000:]
    assert "torch.compile: step" not in output  # the compilation had not finished
    assert "step 4 abandoned" in output and "no step has completed since the last checkpoint" in output
    assert tree_digest(run_dir / "checkpoints") == before


@pytest.mark.slow
def test_sigterm_during_the_first_compilation_of_a_fresh_run_writes_nothing(small_corpus, tmp_path):
    run_dir = tmp_path / "run"
    args = tiny_args(small_corpus, run_dir, "trainer.max_steps=6", "hardware.compile=true")
    process = start(args, tmp_path, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"))
    output, took = signal_when(process, "training for", delay=3.0)
    assert process.returncode == EXIT_REQUEUE and took < 30, output[-3000:]
    assert "no step has completed since the start" in output and "no checkpoint was written" in output
    assert not (run_dir / "checkpoints").exists() or not any((run_dir / "checkpoints").iterdir())


@pytest.mark.slow
def test_sigterm_during_a_long_evaluation_saves_the_step_and_resume_matches(small_corpus, tmp_path):
    # A validation file of 30 copies of the training text, all of it scored: an evaluation of seconds after step 4.
    validation = tmp_path / "valid.txt"
    validation.write_text("\n\n".join([Path(small_corpus["train"]).read_text()] * 30))
    common = ["trainer.max_steps=8", "trainer.save_every=0", "trainer.eval_batches=0", "trainer.batch_size=4"]
    common += [f"data.validation_files=[{validation}]"]
    straight = launch(tiny_args(small_corpus, tmp_path / "straight", *common), tmp_path)
    assert straight.returncode == 0, straight.stderr[-3000:]

    run_dir = tmp_path / "interrupted"
    args = tiny_args(small_corpus, run_dir, *common, "trainer.eval_every=4", "trainer.signal_grace=1")
    process = start(args, tmp_path)
    output, took = signal_when(process, "step 4/8", delay=0.3)
    assert process.returncode == EXIT_REQUEUE and took < 30, output[-3000:]
    assert "the evaluation at step 4 abandoned" in output and "saving step 4" in output
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["last", "step_4"]

    resumed = launch(tiny_args(small_corpus, run_dir, *common, "trainer.eval_every=4"), tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    ends = [
        [r["loss"] for r in read_metrics(d) if "lr" in r and r["step"] == 8] for d in (tmp_path / "straight", run_dir)
    ]
    assert ends[0] == ends[1]


def test_a_drop_swallowed_by_a_finalizer_is_raised_again():
    """A handler may run inside a weakref callback or a __del__, where Python prints what it raises and goes on; the
    next SIGALRM raises again, so the work is still dropped (found when compilation ran weakref callbacks)."""
    import weakref

    class Thing:
        pass

    with StopSignals(grace=60, nothing_to_save=lambda: True) as signals:
        started = time.monotonic()
        with pytest.raises(StepAbandoned), signals.abandonable("step 1"):
            thing = Thing()
            weakref.finalize(thing, lambda: os.kill(os.getpid(), signal.SIGTERM))  # the first raise is swallowed
            del thing
            busy(5.0)
    assert time.monotonic() - started < 2.0
