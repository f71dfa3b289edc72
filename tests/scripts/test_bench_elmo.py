"""scripts/bench_elmo.py pretrains a tiny ELMo for a fixed time with plm-train and tags entities with plm-finetune
over its frozen features, printing every figure and the commands that made it."""

import math

import pytest

from tests.scripts import run_json

WORDS = ["the", "a", "of", "in", "to", "and", "is", "was", "on", "at", "New", "York", "London", "Paris", "visited"]


def conll(sentences: int, offset: int) -> str:
    rows = []
    for i in range(sentences):
        city = ("London", "Paris")[(i + offset) % 2]
        rows += [f"{w}\tO" for w in ("she", "lives", "in")] + [f"{city}\tB-location", "now\tO", ""]
    return "\n".join(rows) + "\n"


@pytest.fixture
def shared(tmp_path):
    """The folders bench_elmo reads, in miniature: WikiText-2's valid and test tokens and WNUT-17's files."""
    root = tmp_path / "shared"
    (root / "wikitext2").mkdir(parents=True)
    (root / "ner").mkdir()
    text = " ".join(WORDS[i * 7 % len(WORDS)] for i in range(400))
    for name in ("wiki.valid.tokens", "wiki.test.tokens"):
        (root / "wikitext2" / name).write_text(f" = Title = \n\n {text} \n", encoding="utf-8")
    (root / "ner" / "wnut17train.conll").write_text(conll(12, 0), encoding="utf-8")
    (root / "ner" / "emerging.test.annotated").write_text(conll(4, 1), encoding="utf-8")
    return root


@pytest.mark.slow
def test_pretraining_then_tagging_over_its_features_report_their_figures(shared, tmp_path):
    # The MiniLM runs are the same plm-finetune command over another checkpoint; two runs keep the test short.
    args = ["--shared", shared, "--out", tmp_path / "runs", "--minutes", "0.005", "--only", "pretrain", "elmo"]
    args += ["--pretrain-batch-size", "4", "--window", "8", "--vocab-size", "30", "--ner-steps", "2"]
    result = run_json("bench_elmo.py", *args, "--ner-batch-size", "4", "--device", "cpu")
    pretrain = result["pretrain"]
    assert pretrain["steps"] >= 1
    for key in ("eval_forward_perplexity", "eval_backward_perplexity", "eval_perplexity"):
        assert math.isfinite(pretrain[key]) and pretrain[key] > 1.0, (key, pretrain)
    (ner,) = result["ner"].values()
    assert list(result["ner"]) == ["elmo_features"] and 0.0 <= ner["f1"] <= 1.0 and ner["seconds"] > 0
    train, tag = result["commands"]
    assert "model=elmo" in train and "finetune.mode=features" in tag and str(tmp_path / "runs") in tag
    assert result["eval_split"] == "test"
