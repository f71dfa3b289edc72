"""Sentence-level metrics as GLUE defines them: accuracy, F1 of the positive class, Matthews correlation,
Pearson and Spearman correlation. Small enough to write out; numpy only.
"""

from __future__ import annotations

import numpy as np


def accuracy(pred, gold) -> float:
    pred, gold = np.asarray(pred), np.asarray(gold)
    return float((pred == gold).mean()) if len(gold) else 0.0


def f1(pred, gold, positive: int = 1) -> float:
    """F1 of the positive class (MRPC, QQP: label 1)."""
    pred, gold = np.asarray(pred) == positive, np.asarray(gold) == positive
    tp = float((pred & gold).sum())
    denominator = float(pred.sum() + gold.sum())
    return 2 * tp / denominator if denominator else 0.0


def matthews(pred, gold) -> float:
    """Matthews correlation (CoLA), the multi-class form of Gorodkin (2004) that reduces to the binary one."""
    pred, gold = np.asarray(pred), np.asarray(gold)
    classes = np.union1d(pred, gold)
    confusion = np.zeros((len(classes), len(classes)))
    np.add.at(confusion, (np.searchsorted(classes, gold), np.searchsorted(classes, pred)), 1)
    t, p = confusion.sum(axis=1), confusion.sum(axis=0)  # true and predicted counts per class
    c, s = np.trace(confusion), confusion.sum()
    denominator = np.sqrt(s * s - (p * p).sum()) * np.sqrt(s * s - (t * t).sum())
    return float((c * s - (t * p).sum()) / denominator) if denominator else 0.0


def pearson(pred, gold) -> float:
    pred, gold = np.asarray(pred, dtype=np.float64), np.asarray(gold, dtype=np.float64)
    if pred.std() == 0 or gold.std() == 0:
        return 0.0
    return float(np.corrcoef(pred, gold)[0, 1])


def _ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks with ties given their average rank."""
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(1, len(x) + 1)
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    sums = np.zeros(len(counts))
    np.add.at(sums, inverse, ranks)
    return (sums / counts)[inverse]


def spearman(pred, gold) -> float:
    return pearson(_ranks(np.asarray(pred, dtype=np.float64)), _ranks(np.asarray(gold, dtype=np.float64)))


METRICS = {"accuracy": accuracy, "f1": f1, "matthews": matthews, "pearson": pearson, "spearman": spearman}
