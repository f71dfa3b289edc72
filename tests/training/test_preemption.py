"""Preemption and time budgets: a signalled run saves the step it was on and resumes to the losses of an
uninterrupted run; a budgeted run stops on time with its learning-rate schedule spread over the budget."""

import itertools
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from plm_toolkit.commands.train import run
from plm_toolkit.core.errors import ConfigError
from plm_toolkit.training import preemption
from plm_toolkit.training.preemption import EXIT_REQUEUE, StopSignals
from tests.commands.test_train import launch
from tests.training.conftest import TINY, read_metrics


def args_for(corpus, run_dir, *extra: str) -> list[str]:
    return [
        *TINY,
        "data=text_files",
        f"data.train_files=[{corpus['train']}]",
        f"data.cache_dir={corpus['cache']}",
        "trainer.max_steps=120",
        "trainer.save_every=0",
        f"hydra.run.dir={run_dir}",
        *extra,
    ]


@pytest.mark.slow
def test_sigterm_saves_the_current_step_and_resume_matches_an_uninterrupted_run(small_corpus, tmp_path):
    straight = launch(args_for(small_corpus, tmp_path / "straight"), tmp_path)
    assert straight.returncode == 0, straight.stderr[-3000:]

    run_dir = tmp_path / "interrupted"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "plm_toolkit.commands.train", *args_for(small_corpus, run_dir)]
    process = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    metrics = run_dir / "metrics.jsonl"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and process.poll() is None:
        if metrics.is_file() and len(metrics.read_text().splitlines()) >= 5:
            break
        time.sleep(0.02)
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=240)
    output = stdout.decode() + stderr.decode()
    assert process.returncode == EXIT_REQUEUE, output[-3000:]
    assert "received SIGTERM" in output and f"exiting with status {EXIT_REQUEUE}" in output
    stopped_at = read_metrics(run_dir)[-1]["step"]
    assert 5 <= stopped_at < 120
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["last", f"step_{stopped_at}"]

    resumed = launch(args_for(small_corpus, run_dir), tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a, b = read_metrics(tmp_path / "straight"), read_metrics(run_dir)
    assert [r["step"] for r in b] == list(range(1, 121))
    assert [r["loss"] for r in a] == [r["loss"] for r in b]


def test_signals_are_held_until_the_step_ends_and_handed_to_an_earlier_handler():
    called = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: called.append(signum))
    try:
        with StopSignals() as signals:
            os.kill(os.getpid(), signal.SIGUSR1)
            assert signals.received == signal.SIGUSR1 and called == []
            signals.hand_over()  # as submitit's requeue handler would be
            assert called == [signal.SIGUSR1]
        os.kill(os.getpid(), signal.SIGUSR1)  # ours is gone again
        assert called == [signal.SIGUSR1, signal.SIGUSR1]
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_time_budget_stops_on_time_and_the_schedule_spans_it(make_config, tmp_path, monkeypatch):
    # A clock that advances one second per reading: every step takes one second, so a 10-second budget holds
    # exactly 10 steps and the learning rate of step n is lr * (1 - (n - 1) / 10).
    ticks = itertools.count()
    monkeypatch.setattr(preemption, "monotonic", lambda: float(next(ticks)))
    cfg = make_config(
        "trainer.max_steps=1000",
        f"trainer.time_budget={10 / 3600}",
        "optimizer.lr=1e-3",
        "optimizer.warmup_ratio=0",
        "trainer.save_every=0",
    )
    run(cfg, tmp_path)
    records = [r for r in read_metrics(tmp_path) if "lr" in r]
    assert [r["step"] for r in records] == list(range(1, 11))
    assert all(abs(r["lr"] - 1e-3 * (1 - (r["step"] - 1) / 10)) < 1e-12 for r in records)
    assert records[-1]["elapsed_s"] == 10.0
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["last", "step_10"]


def test_time_budget_on_the_real_clock(make_config, tmp_path):
    budget = 4.0
    cfg = make_config(
        "trainer.max_steps=100000",
        f"trainer.time_budget={budget / 3600}",
        "trainer.log_every=1",
        "hardware.num_threads=1",
    )
    threads = torch.get_num_threads()
    try:
        run(cfg, tmp_path)
    finally:
        torch.set_num_threads(threads)
    records = [r for r in read_metrics(tmp_path) if "lr" in r]
    # A shared CI machine makes step times jitter: the run stops within a step of the budget, never far past it.
    assert 2 <= len(records) < 100000 and records[-1]["elapsed_s"] <= 1.25 * budget
    # The decay follows the clock: the last step, at the budget's end, is far down from the peak (the second step may
    # still be warming up, so it is no reference).
    assert records[-1]["lr"] < 0.5 * max(r["lr"] for r in records)
    assert (tmp_path / "checkpoints" / f"step_{records[-1]['step']}").is_dir()


def test_time_budget_must_be_positive(make_config, tmp_path):
    with pytest.raises(ConfigError, match=r"trainer.time_budget=0.0: expected a finite number in \(0, inf\)"):
        run(make_config("trainer.time_budget=0"), tmp_path)


def test_progress_bar_under_a_time_budget_counts_the_budget_and_its_eta(monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # the bar is drawn on a terminal (else progress lines)
    # A budget ends this run long before its 1,000,000 steps. Resumed at 25% of the budget and at 99% an hour later,
    # the bar shows 99% and the 1% left at that pace: 48 seconds (it showed 0% and a 473-hour ETA, from the steps).
    from plm_toolkit.training.progress import ProgressBar

    used = [0.25]
    bar = ProgressBar(1_000_000, 0, None, enabled=True, budget_used=lambda: used[0])
    bar.bar.smoothing = 0  # the ETA from the average rate since the start, not from the last updates
    bar.update()
    bar.show({"step": 1, "epoch": 0.5, "loss": 1.0, "lr": 1e-3, "tokens_per_s": 10.0})
    assert bar.bar.n == 250 and "budget=25%" in bar.bar.postfix and "step=1" in bar.bar.postfix
    used[0] = 0.99
    bar.update()
    bar.bar.start_t -= 3600
    meter = str(bar.bar)
    bar.close()
    assert bar.bar.n == 990 and " 99%|" in meter and "<00:48" in meter, meter
    steps = ProgressBar(200, 50, None, enabled=True)  # without a budget: steps of the run
    steps.update()
    assert steps.bar.n == 51 and steps.bar.total == 200
    steps.close()
