"""scripts/bench_memory_eval.py runs and shows memory reuse beating re-encoding the window per token."""

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_memory_eval.py"


def test_memory_reuse_is_faster_than_sliding_window_reencoding(capsys):
    spec = importlib.util.spec_from_file_location("bench_memory_eval", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    args = ["--lengths", "32", "96", "--segment", "16", "--layers", "1", "--hidden", "36", "--heads", "3"]
    result = bench.main([*args, "--inner", "37", "--vocab-size", "50", "--device", "cpu", "--vanilla-tokens", "3"])
    rows = result["results"]
    assert [r["attention_length"] for r in rows] == [32, 96]
    # 96 tokens re-encoded per prediction against 16 new tokens per forward: far more than a few times faster.
    assert rows[-1]["speedup"] > 3, rows
    assert json.loads(capsys.readouterr().out) == result  # stdout is the one JSON object (progress goes to stderr)
