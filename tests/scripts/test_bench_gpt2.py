"""scripts/bench_pretrain.py --model gpt2 runs both models on the same batches and generates the same tokens."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_pretrain.py"


def test_gpt2_benchmark_prints_both_models_and_generation():
    args = ["--model", "gpt2", "--config", "tiny", "--vocab-size", "300", "--batch-size", "2", "--seq-len", "16"]
    args += ["--steps", "1", "--warmup", "1", "--precision", "fp32", "--no-memory", "--new-tokens", "4"]
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["model"] == "gpt2" and result["ours"]["parameters"] == result["transformers"]["parameters"]
    assert result["ours"]["tokens_per_s"] > 0 and result["transformers"]["tokens_per_s"] > 0
    assert result["generation"]["same_tokens"] is True
