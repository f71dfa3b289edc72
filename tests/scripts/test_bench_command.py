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
    args = ["--steps", "8", "--warmup-steps", "2", "--reference-steps", "2", "--reference-warmup", "1"]
    args += ["--variants", "eager", "compiled", "--override", "hardware.compile_backend=aot_eager", "--out", str(out)]
    args += ["--override", "trainer.batch_size=4", "--override", "data.max_seq_len=64"]
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
