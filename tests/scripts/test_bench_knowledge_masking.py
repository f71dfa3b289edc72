"""scripts/bench_knowledge_masking.py pretrains an ERNIE with knowledge masking and one with whole-word masking per
seed, fine-tunes each on SST-2 and reports the metric per run and per masking."""

import math

import pytest

from tests.scripts import run_json


@pytest.mark.slow
def test_both_maskings_are_pretrained_fine_tuned_and_summarised(shared_data, tmp_path):
    corpus = tmp_path / "corpus.txt"
    lines = (shared_data / "wikitext2" / "wiki.valid.tokens").read_text(encoding="utf-8").splitlines()[:300]
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    args = ["--corpus", corpus, "--steps", "3", "--finetune-steps", "2", "--finetune-train-samples", "64"]
    args += ["--seeds", "1", "--batch-size", "4", "--max-seq-len", "32", "--threads", "1", "--out", tmp_path / "out"]
    result = run_json("bench_knowledge_masking.py", *args)
    assert [(r["masking"], r["seed"]) for r in result["runs"]] == [("knowledge", 1), ("whole_word", 1)]
    for run in result["runs"]:
        assert 0.0 <= run["metric"] <= 1.0 and math.isfinite(run["pretrain_loss"])
        assert (tmp_path / "out" / f"{run['masking']}-seed1" / "sst2" / "eval_results.json").is_file()
    for masking, run in zip(("knowledge", "whole_word"), result["runs"], strict=True):
        assert result[masking] == {"mean": run["metric"], "stdev": 0.0, "values": [run["metric"]]}
    assert result["metric"] == "SST-2 dev accuracy"
