"""scripts/make_kbqa_data.py: the shipped KBQA copy is what the script builds from babel's CLDR, and its split asks
about different entities in training and evaluation."""

import functools
import importlib.util
import json
import re
from pathlib import Path

import pytest

from tests.scripts import SCRIPTS, run_json

SHIPPED = Path(__file__).resolve().parents[1] / "tasks" / "files" / "kbqa"
FILES = ("kb_triples.tsv", "kb_names.tsv", "train.jsonl", "validation.jsonl", "test.jsonl")


def rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (SHIPPED / name).read_text(encoding="utf-8").splitlines()]


def test_the_shipped_copy_is_rebuilt_byte_for_byte(tmp_path):
    babel = pytest.importorskip("babel")
    if babel.core.get_global("cldr")["version"] != "47":
        pytest.skip("the shipped copy comes from CLDR 47 (babel 2.18)")
    printed = run_json("make_kbqa_data.py", "--out", tmp_path, "--subjects", 30, "--split", "60,20,20")
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
    # Validation asks in training's wordings, test in the two of each relation that training never shows.
    train = {wording(row) for row in rows("train.jsonl")}
    assert {wording(row) for row in rows("validation.jsonl")} <= train
    test = {wording(row) for row in rows("test.jsonl")}
    assert not test & train and len(test) >= 2 * 10


@functools.cache
def relations() -> dict:
    """The script's RELATIONS: relation -> (kind of subject, wordings)."""
    spec = importlib.util.spec_from_file_location("make_kbqa_data", SCRIPTS / "make_kbqa_data.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script.RELATIONS


def wording(row: dict) -> str:
    """The template the question was written from."""
    for template in relations()[row["relation"]][1]:
        pattern = re.escape(template.lower()).replace(re.escape("{}"), ".+")
        if re.fullmatch(pattern, row["question"].lower(), re.S):
            return template
    raise AssertionError(f"no template writes {row['question']!r}")
