"""The figures ``task=kbqa`` reports, and its predictions file.

- ``answer_accuracy``: hits@1, the share of questions whose top answer (the first object of the chosen pair) is one
  of the gold answers; a question without a chosen pair, or whose gold subject the knowledge base lacks, is wrong.
- ``answer_f1``: the mean over questions of the F1 of the chosen pair's objects against the gold answers.
- ``mention_f1``: conlleval's span F1 of the predicted mentions (first and last word) against the gold ones, over
  the questions whose gold mention the subject's names find (one of each per question).
- ``entity_accuracy`` / ``relation_accuracy``: the chosen entity / relation is the gold subject / relation, over the
  questions that name them; ``candidate_recall``: the gold subject is among the candidates of stage 2.
"""

from __future__ import annotations

from plm_toolkit.tasks.kbqa.data import gold_answers
from plm_toolkit.tasks.kbqa.knowledge_base import KnowledgeBase


def _f1(predicted: list[str], gold: list[str]) -> float:
    shared = len(set(predicted) & set(gold))
    if not shared:
        return 0.0
    precision, recall = shared / len(set(predicted)), shared / len(set(gold))
    return 2 * precision * recall / (precision + recall)


def _share(numerator: int, denominator: int) -> float:
    return numerator / denominator if denominator else 0.0


def kbqa_scores(rows, kb: KnowledgeBase) -> tuple[dict[str, float], list[dict]]:
    """(metrics, one prediction per question) from rows of (Encoded, predicted word span, candidate ids, Choice or
    None, mention text)."""
    hits = f1 = 0.0
    mentions = mentions_right = entities = entities_right = relations = relations_right = recalled = 0
    predictions = []
    for item, span, candidates, choice, mention in rows:
        question = item.question
        gold = gold_answers(question, kb)
        answers = choice.answers if choice is not None else []
        hits += bool(answers) and answers[0] in gold
        f1 += _f1(answers, gold)
        if item.gold_words is not None:
            mentions += 1
            mentions_right += tuple(span) == item.gold_words
        if question.subject:
            entities += 1
            entities_right += choice is not None and choice.entity == question.subject
            recalled += question.subject in candidates
        if question.relation:
            relations += 1
            relations_right += choice is not None and choice.relation == question.relation
        predictions.append(
            {
                "line": question.line,
                "question": question.text,
                "mention": mention,
                "entity": choice.entity if choice else None,
                "relation": choice.relation if choice else None,
                "answers": answers,
                "entity_score": choice.entity_score if choice else None,
                "relation_score": choice.relation_score if choice else None,
                "score": choice.score if choice else None,
                "candidates": len(candidates),
            }
        )
    total = len(rows)
    metrics = {
        "answer_accuracy": _share(hits, total),
        "answer_f1": _share(f1, total),
        # One predicted and at most one gold mention per question: precision = recall = F1 over those with one.
        "mention_f1": _share(mentions_right, mentions),
        "entity_accuracy": _share(entities_right, entities),
        "relation_accuracy": _share(relations_right, relations),
        "candidate_recall": _share(recalled, entities),
        "questions": float(total),
    }
    return metrics, predictions
