"""scripts/make_kbqa_data.py: the shipped KBQA copy is what the script builds from babel's CLDR, and its split asks
about different entities in training and evaluation."""

import json
from pathlib import Path

import pytest

from tests.scripts import run_json

SHIPPED = Path(__file__).resolve().parents[1] / "tasks" / "files" / "kbqa"
FILES = ("kb_triples.tsv", "kb_names.tsv", "train.jsonl", "validation.jsonl", "test.jsonl")


def rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (SHIPPED / name).read_text(encoding="utf-8").splitlines()]


def test_the_shipped_copy_is_rebuilt_byte_for_byte(tmp_path):
    babel = pytest.importorskip("babel")
    if babel.core.get_global("cldr")["version"] != "47":
        pytest.skip("the shipped copy comes from CLDR 47 (babel 2.18)")
    printed = run_json("make_kbqa_data.py", "--out", tmp_path, "--subjects", 30, "--wordings", 2)
    for name in FILES:
        assert (tmp_path / name).read_bytes() == (SHIPPED / name).read_bytes(), name
    assert printed["train_questions"] == len(rows("train.jsonl")) and printed["cldr"] == {"version": "47"}


def test_evaluation_asks_about_entities_that_training_does_not():
    train = {row["subject"] for row in rows("train.jsonl")}
    for split in ("validation.jsonl", "test.jsonl"):
        asked = {row["subject"] for row in rows(split)}
        assert asked and not asked & train, split
        # Every kind of subject is asked about in each split.
        assert {s.split("/")[0] for s in asked} == {s.split("/")[0] for s in train}
    triples = [line.split("\t") for line in (SHIPPED / "kb_triples.tsv").read_text(encoding="utf-8").splitlines()]
    objects = {}
    for subject, relation, obj in triples:
        objects.setdefault((subject, relation), []).append(obj)
    for row in rows("test.jsonl"):
        assert row["answers"] == objects[row["subject"], row["relation"]]
    # Some test questions use the wording that training never shows (the last of each relation's).
    train_starts = {row["question"].lower()[:12] for row in rows("train.jsonl")}
    assert any(row["question"].lower()[:12] not in train_starts for row in rows("test.jsonl"))
