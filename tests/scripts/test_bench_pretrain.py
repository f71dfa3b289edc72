"""scripts/bench_pretrain.py runs every variant and transformers on the same batches and reports them side by side."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_pretrain.py"


@pytest.mark.slow
def test_bench_reports_each_switch_and_the_reference(capsys, monkeypatch):
    pytest.importorskip("transformers")
    monkeypatch.syspath_prepend(str(SCRIPT.parent))  # as `python scripts/bench_pretrain.py` has it: its modules
    spec = importlib.util.spec_from_file_location("bench_pretrain", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    args = ["--config", "tiny", "--vocab-size", "300", "--seq-len", "24", "--batch-size", "4", "--min-fill", "0.2"]
    result = bench.main([*args, "--steps", "2", "--warmup", "1", "--repeats", "2", "--device", "cpu", "--no-memory"])
    assert set(result["runs"]) == {"eager", "fused", "fused+unpad", "transformers"}
    for entry in result["runs"].values():
        assert len(entry["tokens_per_s_rounds"]) == 2 and entry["tokens_per_s"] > 0
    assert result["speedup"] == round(result["ours"]["tokens_per_s"] / result["transformers"]["tokens_per_s"], 2)
    assert set(result["speedups"]) == {"eager", "fused", "fused+unpad"}
    assert json.loads(capsys.readouterr().out)["speedup"] == result["speedup"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without CUDA")
def test_cuda_requested_without_a_gpu_is_one_line():
    done = subprocess.run([sys.executable, str(SCRIPT), "--device", "cuda"], capture_output=True, text=True)
    assert done.returncode == 1 and done.stderr.splitlines() == [done.stderr.strip()]
    assert done.stderr.startswith("error: --device cuda, but this torch") and "Traceback" not in done.stderr
