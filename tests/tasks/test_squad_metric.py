"""The SQuAD v2.0 metric on hand-made predictions, against values worked out by hand from the official
script's definitions."""

import json
import subprocess
import sys

import pytest

from plm_toolkit.tasks.squad.metric import f1_score, normalize_answer, span_threshold_search, squad_evaluate

GOLDS = {
    "q1": ["the Eiffel Tower", "Eiffel Tower"],
    "q2": ["Paris, France"],
    "q3": [],
    "q4": [],
    "q5": ["1990s"],
}
PREDICTIONS = {"q1": "eiffel tower!", "q2": "Paris", "q3": "", "q4": "a dog", "q5": ""}
NULL_ODDS = {"q1": -2.0, "q2": 0.5, "q3": 3.0, "q4": 1.2, "q5": 1.5}


@pytest.mark.parametrize(
    "text,expected",
    [
        ("The  Quick, brown-fox!", "quick brownfox"),
        ("An apple a day", "apple day"),
        ("theatre", "theatre"),  # articles only as whole words
        ("  ", ""),
    ],
)
def test_normalisation(text, expected):
    assert normalize_answer(text) == expected


def test_token_f1_and_empty_answers():
    assert f1_score("Paris, France", "Paris") == pytest.approx(2 / 3)
    assert f1_score("", "") == 1.0
    assert f1_score("", "a dog") == 0.0
    assert f1_score("the", "") == 1.0  # "the" normalises to nothing, like the empty answer


def test_without_null_odds():
    result = squad_evaluate(GOLDS, PREDICTIONS)
    assert result["total"] == 5
    assert result["exact"] == pytest.approx(40.0)  # q1, q3
    assert result["f1"] == pytest.approx(100 * (1 + 2 / 3 + 1) / 5)
    assert result["HasAns_exact"] == pytest.approx(100 / 3) and result["HasAns_total"] == 3
    assert result["HasAns_f1"] == pytest.approx(100 * (1 + 2 / 3) / 3)
    assert result["NoAns_exact"] == 50.0 and result["NoAns_f1"] == 50.0 and result["NoAns_total"] == 2
    assert "best_exact" not in result


def test_null_odds_threshold_and_best_threshold():
    result = squad_evaluate(GOLDS, PREDICTIONS, NULL_ODDS)
    # q4's null odds 1.2 exceed the official default threshold 1.0: scored as "no answer", which is right.
    assert result["exact"] == pytest.approx(60.0)
    assert result["f1"] == pytest.approx(100 * (1 + 2 / 3 + 1 + 1) / 5)
    assert result["NoAns_exact"] == 100.0
    # Sweep from "all unanswerable" (2 right): answering q1 (-2) gives 3; for F1 also q2 (0.5) gives 3 + 2/3.
    assert result["best_exact"] == pytest.approx(60.0) and result["best_exact_thresh"] == -2.0
    assert result["best_f1"] == pytest.approx(100 * (3 + 2 / 3) / 5) and result["best_f1_thresh"] == 0.5


def test_best_threshold_over_span_predictions_can_answer_more():
    # Thresholded at tau = 0, q5 went unanswered (odds 1.5) though its best span was right; q4's span is wrong.
    spans = {**PREDICTIONS, "q3": "tower", "q4": "a dog", "q5": "the 1990s"}
    result = span_threshold_search(GOLDS, spans, NULL_ODDS)
    assert set(result) == {"span_best_exact", "span_best_exact_thresh", "span_best_f1", "span_best_f1_thresh"}
    # Sweep: q1 (-2) +1 -> 3, q2 (0.5) +0, q4 (1.2) -1 -> 2, q5 (1.5) +1 -> 3, q3 (3.0) -1: the best is 3 at -2.
    assert result["span_best_exact"] == pytest.approx(60.0) and result["span_best_exact_thresh"] == -2.0
    # F1: q1 -> 3, q2 -> 3 2/3 (0.5), q4 -> 2 2/3, q5 -> 3 2/3 (not better), q3 -> 2 2/3.
    assert result["span_best_f1"] == pytest.approx(100 * (3 + 2 / 3) / 5) and result["span_best_f1_thresh"] == 0.5
    spans["q4"] = ""  # without q4's wrong span, answering up to q5 wins: 4 of 5
    result = span_threshold_search(GOLDS, spans, NULL_ODDS)
    assert result["span_best_exact"] == pytest.approx(80.0) and result["span_best_exact_thresh"] == 1.5


def test_missing_predictions_count_as_wrong():
    result = squad_evaluate(GOLDS, {"q1": "Eiffel Tower", "q3": ""}, {"q1": -1.0, "q3": 2.0})
    assert result["total"] == 5 and result["exact"] == pytest.approx(40.0)  # q1 and q3 of all five
    assert result["NoAns_exact"] == 50.0  # q4, unanswerable but without a prediction, is wrong
    # The sweep starts from q3 alone right (q4 has no prediction); answering q1 adds one: 2 of 5.
    assert result["best_exact"] == pytest.approx(40.0)


def test_command_line_matches_the_function(tmp_path):
    data = {"data": [{"paragraphs": [{"context": "x", "qas": []}]}]}
    data["data"][0]["paragraphs"][0]["qas"] = [
        {"id": q, "question": "?", "answers": [{"text": t, "answer_start": 0} for t in answers]}
        for q, answers in GOLDS.items()
    ]
    predicted = {q: a for q, a in PREDICTIONS.items() if q != "q5"}
    files = {"data.json": data, "pred.json": predicted, "odds.json": NULL_ODDS}
    for name, value in files.items():
        (tmp_path / name).write_text(json.dumps(value))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "plm_toolkit.tasks.squad.metric",
            "data.json",
            "pred.json",
            "--na-prob-file",
            "odds.json",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout) == pytest.approx(squad_evaluate(GOLDS, predicted, NULL_ODDS))
    assert json.loads(out.stdout)["total"] == 5  # the whole file: q5's missing prediction counts as wrong
    assert out.stderr == "1 of 5 questions have no prediction in pred.json, scored as wrong (first: q5)\n"
