"""scripts/bench_pretrain.py runs every variant and transformers on the same batches and reports them side by side."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_pretrain.py"


def load_bench(monkeypatch):
    """scripts/bench_pretrain.py as a module, with scripts/ on the path as `python scripts/bench_pretrain.py` has it."""
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("bench_pretrain", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


@pytest.mark.slow
def test_bench_reports_each_switch_and_the_reference(capsys, monkeypatch):
    pytest.importorskip("transformers")
    bench = load_bench(monkeypatch)
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


def test_compiled_variants_race_the_compiled_reference_in_their_own_mode(monkeypatch):
    """--reference-compile: a compiled variant over transformers+compile, one with CUDA graphs over the reference with
    them; eager variants and other batch sizes are left out (compiling both on a CPU takes minutes: the arithmetic
    alone here)."""
    bench = load_bench(monkeypatch)
    runs = {
        "fused": {"batch_size": 32, "tokens_per_s": 90.0},
        "fused+compile": {"batch_size": 32, "tokens_per_s": 120.0},
        "fused+compile+cudagraphs": {"batch_size": 32, "tokens_per_s": 300.0},
        "fused+compile+unpad@256": {"batch_size": 256, "tokens_per_s": 500.0},
        "transformers": {"batch_size": 32, "tokens_per_s": 100.0},
        "transformers+compile": {"batch_size": 32, "tokens_per_s": 110.0},
        "transformers+compile+cudagraphs": {"batch_size": 32, "tokens_per_s": 250.0},
    }
    assert bench.compiled_speedups(runs, 32) == {"fused+compile": 1.09, "fused+compile+cudagraphs": 1.2}


@pytest.mark.slow
def test_compiled_references_are_built_only_where_a_variant_needs_them(monkeypatch, tmp_path):
    """(Compiled lazily, at their first step: building them is quick, the compiled variants' set-up is not.)"""
    bench = load_bench(monkeypatch)
    tiny = ["--config", "tiny", "--vocab-size", "300", "--seq-len", "24", "--batch-size", "4", "--large-batch", "0"]
    for variants, references in (
        (["fused"], []),
        (["fused+compile"], ["transformers+compile"]),
        (["fused+compile+cudagraphs"], ["transformers+compile", "transformers+compile+cudagraphs"]),
    ):
        args = bench.parse_args([*tiny, "--variants", *variants, *(["--reference-compile"] if references else [])])
        names = [r.name for r in bench.build_runners(args, torch.device("cpu"), "fp32", tmp_path)]
        assert names == [*variants, "transformers", *references]
