"""scripts/bench_data.py runs end to end on a small generated corpus and prints sane JSON."""

import pytest

from tests.scripts import run_json


@pytest.mark.slow
def test_bench_data_prints_the_store_against_encode_batch(shared_data, tmp_path):
    source = shared_data / "wikitext2" / "wiki.test.raw"
    args = ["--size-mb", 2, "--models", "gpt2", "--repeats", 1, "--skip-datasets", "--workdir", tmp_path / "w"]
    result = run_json("bench_data.py", *args, "--source", source, "--vocab-size", 2000)
    assert result["corpus_mb"] >= 2 and result["tokens"] > 300_000
    one = result["prepare_1"]
    assert one["bytes_per_token"] == 2.0 and one["shards"] == 2  # uint16 ids; 1 MB shards
    assert 0.3 < result["per_process_vs_encode_batch"] < 3 and result["speedup"] > 0.3  # sane, not a target here
    assert 0 < result["train"]["first_step_seconds"] < result["train"]["seconds"]
    assert result["layouts"]["gpt2"]["train_peak_anon_mb"] > 50
    assert not (tmp_path / "w").exists()  # the generated corpus and stores are removed
