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
