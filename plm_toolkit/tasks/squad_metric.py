"""The SQuAD v2.0 evaluation, as the official script (evaluate-v2.0.py, Rajpurkar et al. 2018) defines it.

Answers are normalised (lower-cased, punctuation and the articles a/an/the removed, whitespace collapsed);
exact match and token F1 take the maximum over the gold answers; an unanswerable question's only gold answer is
the empty string. With no-answer scores (``null_odds``: higher means more likely unanswerable) the script also
predicts "no answer" wherever the score exceeds ``na_prob_thresh`` (1.0 by default) and searches the threshold
that maximises each score (best_exact, best_f1). Questions without a prediction are left out, as the script does.

    python -m plm_toolkit.tasks.squad_metric dev-v2.0.json predictions.json --na-prob-file null_odds.json
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import string

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def answer_tokens(text: str) -> list[str]:
    return normalize_answer(text).split() if text else []


def exact_score(gold: str, prediction: str) -> int:
    return int(normalize_answer(gold) == normalize_answer(prediction))


def f1_score(gold: str, prediction: str) -> float:
    gold_tokens, predicted_tokens = answer_tokens(gold), answer_tokens(prediction)
    if not gold_tokens or not predicted_tokens:
        # An empty answer on either side scores 1 only when both are empty.
        return float(gold_tokens == predicted_tokens)
    same = sum((collections.Counter(gold_tokens) & collections.Counter(predicted_tokens)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def raw_scores(golds: dict[str, list[str]], predictions: dict[str, str]) -> tuple[dict, dict]:
    """Per question: max exact and max F1 over its gold answers (those that normalise to nothing are dropped)."""
    exact, f1 = {}, {}
    for qid, answers in golds.items():
        if qid not in predictions:
            continue
        kept = [a for a in answers if normalize_answer(a)] or [""]
        exact[qid] = max(exact_score(a, predictions[qid]) for a in kept)
        f1[qid] = max(f1_score(a, predictions[qid]) for a in kept)
    return exact, f1


def apply_threshold(scores: dict, null_odds: dict, has_answer: dict, threshold: float) -> dict:
    return {qid: float(not has_answer[qid]) if null_odds[qid] > threshold else s for qid, s in scores.items()}


def _averages(exact: dict, f1: dict, qids: list[str]) -> dict:
    return {
        "exact": 100.0 * sum(exact[q] for q in qids) / len(qids),
        "f1": 100.0 * sum(f1[q] for q in qids) / len(qids),
        "total": len(qids),
    }


def best_threshold(predictions: dict, scores: dict, null_odds: dict, has_answer: dict) -> tuple[float, float]:
    """Sweep the threshold over the sorted no-answer scores: start from "everything unanswerable" and let each
    question in turn be answered; keep the best total (the official find_best_thresh)."""
    current = best = sum(1 for q in scores if not has_answer[q])
    threshold = 0.0
    for qid in sorted(null_odds, key=lambda q: null_odds[q]):
        if qid not in scores:
            continue
        if has_answer[qid]:
            current += scores[qid]
        elif predictions[qid]:
            current -= 1
        if current > best:
            best, threshold = current, null_odds[qid]
    return 100.0 * best / len(scores), threshold


def squad_evaluate(
    golds: dict[str, list[str]],
    predictions: dict[str, str],
    null_odds: dict[str, float] | None = None,
    na_prob_thresh: float = 1.0,
    span_predictions: dict[str, str] | None = None,
) -> dict[str, float]:
    """The official v2.0 result dict: exact, f1, total, HasAns_*, NoAns_* and, with null_odds, best_*.

    ``golds`` maps each question id to its gold answer texts (empty for an unanswerable question). The threshold
    search runs on ``span_predictions`` when given (the best non-null span of every question): the official
    search only lets questions with a non-empty prediction be answered, so over predictions already thresholded
    at tau = 0 it could only lower tau; over the spans it finds the best tau in both directions. Running the
    official script on the span predictions gives the same best_* values.
    """
    has_answer = {qid: bool(answers) for qid, answers in golds.items()}
    exact_raw, f1_raw = raw_scores(golds, predictions)
    if not exact_raw:
        return {"exact": 0.0, "f1": 0.0, "total": 0}
    odds = null_odds if null_odds is not None else {qid: 0.0 for qid in predictions}
    exact = apply_threshold(exact_raw, odds, has_answer, na_prob_thresh)
    f1 = apply_threshold(f1_raw, odds, has_answer, na_prob_thresh)
    result = _averages(exact, f1, list(exact))
    for prefix, wanted in (("HasAns", True), ("NoAns", False)):
        qids = [q for q in exact if has_answer[q] == wanted]
        if qids:
            result.update({f"{prefix}_{k}": v for k, v in _averages(exact, f1, qids).items()})
    if null_odds is not None:
        spans = predictions if span_predictions is None else span_predictions
        exact_spans, f1_spans = (exact_raw, f1_raw) if span_predictions is None else raw_scores(golds, spans)
        result["best_exact"], result["best_exact_thresh"] = best_threshold(spans, exact_spans, odds, has_answer)
        result["best_f1"], result["best_f1_thresh"] = best_threshold(spans, f1_spans, odds, has_answer)
    return result


def golds_of(dataset: dict) -> dict[str, list[str]]:
    """Question id -> gold answer texts of an official SQuAD JSON (already parsed)."""
    return {
        qa["id"]: [a["text"] for a in qa["answers"]]
        for article in dataset["data"]
        for paragraph in article["paragraphs"]
        for qa in paragraph["qas"]
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_file")
    parser.add_argument("pred_file")
    parser.add_argument("--na-prob-file")
    parser.add_argument("--na-prob-thresh", type=float, default=1.0)
    args = parser.parse_args()
    with open(args.data_file, encoding="utf-8") as f:
        golds = golds_of(json.load(f))
    with open(args.pred_file, encoding="utf-8") as f:
        predictions = json.load(f)
    odds = None
    if args.na_prob_file:
        with open(args.na_prob_file, encoding="utf-8") as f:
            odds = json.load(f)
    print(json.dumps(squad_evaluate(golds, predictions, odds, args.na_prob_thresh), indent=2))


if __name__ == "__main__":
    main()
