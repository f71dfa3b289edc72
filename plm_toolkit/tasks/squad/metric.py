"""The SQuAD v2.0 evaluation, as the official script (evaluate-v2.0.py, Rajpurkar et al. 2018) defines it.

Answers are normalised (lower-cased, punctuation and the articles a/an/the removed, whitespace collapsed);
exact match and token F1 take the maximum over the gold answers; an unanswerable question's only gold answer is
the empty string. With no-answer scores (``null_odds``: higher means more likely unanswerable) the script also
predicts "no answer" wherever the score exceeds ``na_prob_thresh`` (1.0 by default) and searches the threshold
that maximises each score (best_exact, best_f1). Every question of the data file is scored: one without a
prediction counts as wrong (the official script stops with a KeyError there), and the command says how many.

    python -m plm_toolkit.tasks.squad.metric dev-v2.0.json predictions.json --na-prob-file null_odds.json
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import re
import string
import sys

from plm_toolkit.core.errors import DataError
from plm_toolkit.data.sources.user_files import read_json
from plm_toolkit.tasks.squad.data import read_squad

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
    """Per question: max exact and max F1 over its gold answers (those that normalise to nothing are dropped). A
    question without a prediction scores 0, whether it has an answer or not."""
    exact, f1 = {}, {}
    for qid, answers in golds.items():
        if qid not in predictions:
            exact[qid] = f1[qid] = 0.0
            continue
        kept = [a for a in answers if normalize_answer(a)] or [""]
        exact[qid] = max(exact_score(a, predictions[qid]) for a in kept)
        f1[qid] = max(f1_score(a, predictions[qid]) for a in kept)
    return exact, f1


def apply_threshold(scores: dict, null_odds: dict, has_answer: dict, threshold: float, predicted: dict) -> dict:
    """Score "no answer" where the null odds exceed the threshold (never for a question without a prediction)."""
    return {
        qid: float(not has_answer[qid]) if null_odds.get(qid, -math.inf) > threshold and qid in predicted else s
        for qid, s in scores.items()
    }


def _averages(exact: dict, f1: dict, qids: list[str]) -> dict:
    return {
        "exact": 100.0 * sum(exact[q] for q in qids) / len(qids),
        "f1": 100.0 * sum(f1[q] for q in qids) / len(qids),
        "total": len(qids),
    }


def best_threshold(predictions: dict, scores: dict, null_odds: dict, has_answer: dict) -> tuple[float, float]:
    """Sweep the threshold over the sorted no-answer scores: start from "everything unanswerable" and let each
    question in turn be answered; keep the best total (the official find_best_thresh). A question without a
    prediction is never right."""
    current = best = sum(1 for q in scores if not has_answer[q] and q in predictions)
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
) -> dict[str, float]:
    """The official v2.0 result dict: exact, f1, total, HasAns_*, NoAns_* and, with null_odds, best_*.

    ``golds`` maps each question id to its gold answer texts (empty for an unanswerable question); every one is
    scored, and one without a prediction counts as wrong.
    """
    has_answer = {qid: bool(answers) for qid, answers in golds.items()}
    exact_raw, f1_raw = raw_scores(golds, predictions)
    if not exact_raw:
        return {"exact": 0.0, "f1": 0.0, "total": 0}
    odds = null_odds if null_odds is not None else {qid: 0.0 for qid in predictions}
    exact = apply_threshold(exact_raw, odds, has_answer, na_prob_thresh, predictions)
    f1 = apply_threshold(f1_raw, odds, has_answer, na_prob_thresh, predictions)
    result = _averages(exact, f1, list(exact))
    for prefix, wanted in (("HasAns", True), ("NoAns", False)):
        qids = [q for q in exact if has_answer[q] == wanted]
        if qids:
            result.update({f"{prefix}_{k}": v for k, v in _averages(exact, f1, qids).items()})
    if null_odds is not None:
        result["best_exact"], result["best_exact_thresh"] = best_threshold(predictions, exact_raw, odds, has_answer)
        result["best_f1"], result["best_f1_thresh"] = best_threshold(predictions, f1_raw, odds, has_answer)
    return result


def span_threshold_search(golds: dict[str, list[str]], spans: dict[str, str], null_odds: dict[str, float]) -> dict:
    """The best-threshold search over every question's best non-null span (``span_best_*``; the thresholds are
    values of tau, ``task.null_score_diff_threshold``). The official search runs over predictions already
    thresholded, where an unanswered question can never be answered, so it can only lower tau; over the spans it
    finds the best tau in both directions. The official script on the spans and these null odds gives the same."""
    has_answer = {qid: bool(answers) for qid, answers in golds.items()}
    exact, f1 = raw_scores(golds, spans)
    best_exact, exact_thresh = best_threshold(spans, exact, null_odds, has_answer)
    best_f1, f1_thresh = best_threshold(spans, f1, null_odds, has_answer)
    return {
        "span_best_exact": best_exact,
        "span_best_exact_thresh": exact_thresh,
        "span_best_f1": best_f1,
        "span_best_f1_thresh": f1_thresh,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_file")
    parser.add_argument("pred_file")
    parser.add_argument("--na-prob-file")
    parser.add_argument("--na-prob-thresh", type=float, default=1.0)
    args = parser.parse_args()
    try:
        examples, _ = read_squad(args.data_file)
        golds = {e.qid: [text for text, _ in e.answers] for e in examples}
        predictions = read_json(args.pred_file)
        odds = read_json(args.na_prob_file) if args.na_prob_file else None
        if not isinstance(predictions, dict) or (odds is not None and not isinstance(odds, dict)):
            raise DataError(f"{args.pred_file}: expected one JSON object: question id -> answer text")
    except DataError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
    missing = [qid for qid in golds if qid not in predictions]
    if missing:
        print(
            f"{len(missing)} of {len(golds)} questions have no prediction in {args.pred_file}, scored as wrong "
            f"(first: {missing[0]})",
            file=sys.stderr,
        )
    print(json.dumps(squad_evaluate(golds, predictions, odds, args.na_prob_thresh), indent=2))


if __name__ == "__main__":
    main()
