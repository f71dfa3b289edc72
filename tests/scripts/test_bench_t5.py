"""scripts/bench_pretrain.py --model t5 trains both T5s on the same span-corrupted batches, with equal parameter
counts (the same architecture)."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_pretrain.py"


def test_t5_benchmark_prints_both_models():
    args = ["--model", "t5", "--config", "tiny", "--vocab-size", "32100", "--batch-size", "2", "--seq-len", "16"]
    args += ["--steps", "1", "--warmup", "1", "--precision", "fp32", "--no-memory"]
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["model"] == "t5" and result["ours"]["parameters"] == result["transformers"]["parameters"]
    assert result["ours"]["tokens_per_s"] > 0 and result["transformers"]["tokens_per_s"] > 0


def test_gemm_share_profiles_both_models_and_bounds_the_speedup():
    script = SCRIPT.parent / "gemm_share.py"
    args = ["--model", "t5", "--config", "tiny", "--batch-size", "2", "--seq-len", "16", "--warmup", "1"]
    done = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    for name in ("ours", "transformers"):
        entry = result[name]
        assert 0 < entry["gemm_s"] < entry["profiled_s"] and 0 < entry["gemm_share"] < 1
    assert result["bound"] == round(result["transformers"]["profiled_s"] / result["ours"]["gemm_s"], 2)
