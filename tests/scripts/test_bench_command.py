"""scripts/bench_command.py runs plm-train itself and reads its throughput after warm-up: a short CPU run of two
variants (the compiled one through aot_eager, so that it compiles in seconds) beside the transformers reference."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_command.py"


@pytest.mark.slow
def test_bench_command_reads_the_command_metrics_beside_the_reference(tmp_path):
    out = tmp_path / "bench.json"
    args = [
        "--steps",
        "8",
        "--warmup-steps",
        "2",
        "--reference-steps",
        "2",
        "--reference-warmup",
        "1",
        "--log-every",
        "1",
    ]
    args += ["--variants", "eager", "compiled", "--override", "hardware.compile_backend=aot_eager", "--out", str(out)]
    args += ["--override", "trainer.batch_size=4", "--override", "data.max_seq_len=64", "--rounds", "2"]
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    case = result["cases"]["bert_tiny_cpu"]
    eager, compiled = case["variants"]["eager"], case["variants"]["compiled"]
    assert eager["exit"] == 0 and compiled["exit"] == 0
    assert "compiled_graphs" not in eager and compiled["compiled_graphs"] >= 1 and compiled["compile_s"] > 0
    # Step 1 compiled: the figures start after it and after the warm-up steps.
    assert compiled["first_timed_step"] == 3 and compiled["steps_timed"] == 6
    for entry in (eager, compiled):
        assert entry["tokens_per_s"] > 0 and entry["steps_wall_s"] > 0
        assert entry["tokens_per_step"] <= 4 * 64
    assert case["reference"]["rows"] == 4 and case["reference"]["width"] == 64
    assert set(case["speedup_vs_reference"]) == {"eager", "compiled"}
    # Two rounds in turns: each variant's figures are its median run, the rounds' beside them.
    assert len(eager["rounds_tokens_per_s"]) == 2 and eager["tokens_per_s"] == min(eager["rounds_tokens_per_s"])
    paired = case["speedup_vs_eager_by_round"]["compiled"]
    assert len(paired["rounds"]) == 2 and paired["median"] == sum(paired["rounds"]) / 2


def load_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_command", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rounds_keep_the_median_run_and_pair_each_round_with_eager():
    bench = load_script()
    runs = {
        "eager": [{"tokens_per_s": 100.0}, {"tokens_per_s": 50.0}, {"tokens_per_s": 80.0}],
        "compiled": [{"tokens_per_s": 110.0}, {"tokens_per_s": 60.0}, {"exit": 1, "error": ["boom"]}],
    }
    assert bench.median_run(runs["eager"]) == {"tokens_per_s": 80.0, "rounds_tokens_per_s": [100.0, 50.0, 80.0]}
    # A failed round counts for nothing; of two, the lower middle one is kept.
    assert bench.median_run(runs["compiled"])["tokens_per_s"] == 60.0
    assert bench.paired_speedups(runs) == {"compiled": {"median": 1.15, "rounds": [1.1, 1.2]}}
    assert bench.median_run([{"exit": 1}]) == {"exit": 1}


def test_rounds_below_one_are_refused_in_one_line():
    done = subprocess.run([sys.executable, str(SCRIPT), "--rounds", "0"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and not done.stdout
    assert done.stderr.strip() == "bench_command.py: error: --rounds 0: expected 1 or more runs of each variant"


def test_log_windows_count_their_steps_and_the_warmup_window_is_left_out():
    bench = load_script()
    # trainer.log_every=10: each record's step_s is the mean of its window's steps; step 1 compiled.
    records = [
        {
            "step": step,
            "loss": 9.0 - step / 10,
            "lr": 1e-4,
            "tokens_per_s": tps,
            "step_s": seconds,
            "compiled_graphs": 1,
        }
        for step, tps, seconds in ((10, 50.0, 2.0), (20, 100.0, 0.5), (30, 200.0, 0.25), (35, 200.0, 0.25))
    ]
    out = bench.after_warmup(records, warmup=12)  # the window of steps 11-20 starts before step 12: left out
    assert out["first_timed_step"] == 21 and out["steps_timed"] == 15
    assert out["steps_wall_s"] == 15 * 0.25 and out["tokens_per_s"] == 200.0 and out["tokens_per_step"] == 50
    out = bench.after_warmup(records, warmup=10)
    assert out["first_timed_step"] == 11 and out["steps_timed"] == 25
    assert out["tokens_per_s"] == round((100 * 5 + 200 * 3.75) / (5 + 3.75), 1)


def test_a_variant_past_its_time_limit_is_recorded_and_the_run_goes_on(tmp_path):
    out, logs = tmp_path / "bench.json", tmp_path / "logs"
    args = [
        "--variants",
        "eager",
        "compiled",
        "--timeout",
        "1",
        "--no-reference",
        "--out",
        str(out),
        "--logs",
        str(logs),
    ]
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    variants = json.loads(out.read_text())["cases"]["bert_tiny_cpu"]["variants"]
    for entry in variants.values():
        assert entry["exit"] is None and entry["error"] == "timed out after 1 s" and entry["steps_logged"] == 0
    assert sorted(p.name for p in logs.iterdir()) == ["bert_tiny_cpu.compiled.0.log", "bert_tiny_cpu.eager.0.log"]
