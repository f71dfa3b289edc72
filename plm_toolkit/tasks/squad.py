"""Extractive question answering on SQuAD v1.1 and v2.0 (Rajpurkar et al. 2016, 2018), as in BERT (Devlin et al.
2019, sections 4.2 and 4.3).

The question is segment A and the context segment B, laid out by the tokenizer's own template (BERT:
``[CLS] q [SEP] c [SEP]``; XLNet puts its summary token last). A context longer than the sequence is cut into
windows whose starts are ``doc_stride`` tokens apart; answers are mapped to tokens through the tokenizer's
character offsets, and a window that does not hold the whole answer (or an unanswerable question) points start and
end at the summary token. A span head scores every token as start (S.T_i) and end (E.T_j); decoding takes the
best valid span (end after start, at most ``max_answer_length`` tokens, start in the window where it has the most
context) over all windows and maps it back to the original context text through the offsets. SQuAD 2.0 predicts
no answer when s_null = S.C + E.C (smallest over the windows) exceeds the best span score by more than tau
(``null_score_diff_threshold``); ``null_odds.json`` holds s_null - best span score - tau, so that the official
script rescoring ``predictions.json`` with it gives the numbers of ``eval_results.json``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch import nn

from plm_toolkit.data.vocab import Vocab
from plm_toolkit.errors import ConfigError, DataError
from plm_toolkit.objectives.base import ObjectiveOutput
from plm_toolkit.registry import TASKS
from plm_toolkit.tasks.base import Task, TaskData, Template, encode, limit, template_of
from plm_toolkit.tasks.heads import SpanHead
from plm_toolkit.tasks.squad_metric import span_threshold_search, squad_evaluate

log = logging.getLogger("plm_toolkit")

# Score given to padding positions, so they never win a softmax or a decoding argmax.
_NEVER = -1e4


@dataclass
class SquadConfig:
    # Registry name: squad2 (SQuAD 2.0) or squad1 (SQuAD 1.1).
    name: str = "squad2"
    # Questions may be unanswerable (SQuAD 2.0): they are trained to point at the summary token, and decoding
    # compares the null score with the best span.
    version_2_with_negative: bool = True
    # Tokens between the starts of consecutive windows over a long context (BERT: 128).
    doc_stride: int = 128
    # Questions are cut to this many tokens (BERT: 64).
    max_query_length: int = 64
    # Longest answer, in tokens, that decoding returns (BERT: 30).
    max_answer_length: int = 30
    # Start and end candidates per window that decoding pairs up (BERT: 20).
    n_best_size: int = 20
    # tau: predict no answer when s_null - best span score exceeds it (SQuAD 2.0; BERT's default 0).
    null_score_diff_threshold: float = 0.0


@dataclass
class SquadExample:
    qid: str
    question: str
    # Index into the list of distinct contexts (questions share their paragraph's encoding).
    context: int
    # Gold answers as (text, character start); empty for an unanswerable question.
    answers: list[tuple[str, int]]
    is_impossible: bool
    # Where the question sits in the JSON, for messages: data[i].paragraphs[j].qas[k].
    where: str


@dataclass
class Window:
    """What decoding needs to know about one feature beyond its tensors."""

    example: int
    # Position of the first context token in the sequence, index of that token in the context, and count.
    context_start: int
    first_token: int
    length: int
    # Position of the summary token (BERT's [CLS]) in the sequence.
    cls_index: int
    # For each context token of the window: is this the window where it has the most context (BERT's rule)?
    max_context: list[bool] = field(default_factory=list)


def _get(node, key: str, kind: type, path: Path, where: str):
    if not isinstance(node, dict) or key not in node:
        raise DataError(f"{path}: {where}: missing {key!r}; expected the official SQuAD JSON layout")
    value = node[key]
    if not isinstance(value, kind):
        expected = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise DataError(f"{path}: {where}.{key}: expected {expected}, found {type(value).__name__}")
    return value


def read_squad(path: str | Path, training: bool = False) -> tuple[list[SquadExample], list[str]]:
    """Questions and distinct contexts of an official SQuAD JSON file (v1.1 or v2.0).

    A question marked ``is_impossible: false`` without answers contradicts itself: a training file is refused
    (naming its id); an evaluation file keeps it as unanswerable, as the official script scores it, and counts it.
    """
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as handle:
            dataset = json.load(handle)
    except json.JSONDecodeError as err:
        raise DataError(f"{path}:{err.lineno}:{err.colno}: not valid JSON ({err.msg})") from None
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(f"{path}: unreadable ({err})") from None
    examples, contexts, contradictions = [], [], []
    for i, article in enumerate(_get(dataset, "data", list, path, "top level")):
        for j, paragraph in enumerate(_get(article, "paragraphs", list, path, f"data[{i}]")):
            where_p = f"data[{i}].paragraphs[{j}]"
            contexts.append(_get(paragraph, "context", str, path, where_p))
            for k, qa in enumerate(_get(paragraph, "qas", list, path, where_p)):
                where = f"{where_p}.qas[{k}]"
                answers = []
                for n, answer in enumerate(_get(qa, "answers", list, path, where)):
                    text = _get(answer, "text", str, path, f"{where}.answers[{n}]")
                    answers.append((text, _get(answer, "answer_start", int, path, f"{where}.answers[{n}]")))
                impossible = bool(qa.get("is_impossible", False))
                qid = str(_get(qa, "id", (str, int), path, where))
                if qa.get("is_impossible") is False and not answers:
                    if training:
                        raise DataError(
                            f"{path}: {where} (id={qid}): is_impossible is false but there are no answers; give its "
                            "answer or set is_impossible: true"
                        )
                    contradictions.append(f"{where} id={qid}")
                examples.append(
                    SquadExample(
                        qid,
                        _get(qa, "question", str, path, where),
                        len(contexts) - 1,
                        [] if impossible else answers,
                        impossible,
                        where,
                    )
                )
    if not examples:
        raise DataError(f"{path}: no questions")
    if contradictions:
        log.warning(
            "%s: %d question(s) with is_impossible: false but no answers, scored as unanswerable (first: %s)",
            path,
            len(contradictions),
            contradictions[0],
        )
    return examples, contexts


def sliding_windows(num_tokens: int, budget: int, stride: int) -> list[tuple[int, int]]:
    """(first token, length) of BERT's windows over a context: starts ``stride`` apart until it is covered."""
    spans, first = [], 0
    while True:
        length = min(num_tokens - first, budget)
        spans.append((first, length))
        if first + length >= num_tokens:
            return spans
        first += min(length, stride)


def _max_context_windows(num_tokens: int, spans: list[tuple[int, int]]) -> np.ndarray:
    """For each context token, the window (first, length) where it has the most context on its shorter side
    (BERT's _check_is_max_context: min(left, right) + 0.01 * length)."""
    best = np.full(num_tokens, -1)
    best_score = np.full(num_tokens, -np.inf)
    for w, (first, length) in enumerate(spans):
        positions = np.arange(first, first + length)
        score = np.minimum(positions - first, first + length - 1 - positions) + 0.01 * length
        better = score > best_score[positions]
        best[positions[better]], best_score[positions[better]] = w, score[better]
    return best


def answer_tokens(offsets: list[tuple[int, int]], start: int, text: str) -> tuple[int, int] | None:
    """First and last context token overlapping the characters [start, start + len(text)), or None."""
    end = start + len(text)
    inside = [i for i, (a, b) in enumerate(offsets) if b > start and a < end and b > a]
    return (inside[0], inside[-1]) if inside else None


def build_features(
    examples: list[SquadExample],
    contexts: list[str],
    tokenizer: Tokenizer,
    vocab: Vocab,
    config: SquadConfig,
    max_seq_len: int,
    training: bool,
    source: str = "",
) -> tuple[list[dict], list[Window], list[list[tuple[int, int]]]]:
    """Features (input_ids, token_type_ids, start/end positions, feature_index), their windows, and each
    context's token offsets. Training questions whose answer_start does not match their text are skipped and
    counted, as the reference implementation does."""
    template: Template = template_of(tokenizer, pair=True)
    cls_index = next((p for p, (piece, _) in enumerate(template.pieces) if piece == vocab.cls_id), None)
    context_encodings = tokenizer.encode_batch(contexts, add_special_tokens=False)
    offsets = [e.offsets for e in context_encodings]
    questions = tokenizer.encode_batch([e.question for e in examples], add_special_tokens=False)
    features, windows, skipped = [], [], []
    for index, (example, question) in enumerate(zip(examples, questions, strict=True)):
        query = question.ids[: config.max_query_length]
        budget = max_seq_len - len(query) - template.num_special
        if budget < 1:
            raise ConfigError(
                f"data.max_seq_len={max_seq_len} leaves no room for the context after a {len(query)}-token question; "
                "raise it or lower task.max_query_length"
            )
        context_ids, context_offsets = context_encodings[example.context].ids, offsets[example.context]
        target = None
        if example.answers:
            text, start = example.answers[0]
            if contexts[example.context][start : start + len(text)] != text:
                skipped.append(example)
                if training:
                    continue
            else:
                target = answer_tokens(context_offsets, start, text)
        elif training and not config.version_2_with_negative:
            raise DataError(f"{source}: {example.where}: no answer, but task.version_2_with_negative=false")
        spans = sliding_windows(len(context_ids), budget, config.doc_stride)
        best = _max_context_windows(len(context_ids), spans)
        for w, (first, length) in enumerate(spans):
            ids, types, starts = template.assemble(query, context_ids[first : first + length])
            # The summary token's position: after the pieces before it in the template (BERT: 0; XLNet: last).
            before = template.pieces[:cls_index] if cls_index is not None else []
            cls = sum(len(query) if p == "A" else length if p == "B" else 1 for p, _ in before)
            start_pos = end_pos = cls
            if target is not None and first <= target[0] and target[1] < first + length:
                start_pos, end_pos = starts["B"] + target[0] - first, starts["B"] + target[1] - first
            feature = {
                "input_ids": ids,
                "token_type_ids": types,
                "start_positions": start_pos,
                "end_positions": end_pos,
            }
            if not training:
                feature["feature_index"] = len(windows)
                windows.append(
                    Window(index, starts["B"], first, length, cls, (best[first : first + length] == w).tolist())
                )
            features.append(feature)
    if training and not features:
        first = f" (first: {skipped[0].where} id={skipped[0].qid})" if skipped else ""
        raise DataError(
            f"no usable training examples in {source} ({len(skipped)} skipped: answer_start does not match the "
            f"answer text{first})"
        )
    if skipped:
        log.warning(
            "%s: %d question(s) whose answer_start does not match the answer text%s (first: %s id=%s)",
            source,
            len(skipped),
            ", skipped for training" if training else "",
            skipped[0].where,
            skipped[0].qid,
        )
    return features, windows, offsets


def decode(
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    windows: list[Window],
    feature_rows: list[int],
    context: str,
    offsets: list[tuple[int, int]],
    config: SquadConfig,
) -> tuple[str, float]:
    """(answer text, s_null - best span score) of one question from the logits of its windows."""
    best_score, best_span, null = -np.inf, None, np.inf
    for row in feature_rows:
        window, s, e = windows[row], start_logits[row], end_logits[row]
        null = min(null, float(s[window.cls_index] + e[window.cls_index]))
        lo, hi = window.context_start, window.context_start + window.length
        starts_ok = np.where(np.asarray(window.max_context), s[lo:hi], -np.inf)
        n = min(config.n_best_size, window.length)
        top_start = np.argsort(-starts_ok, kind="stable")[:n]
        top_end = np.argsort(-e[lo:hi], kind="stable")[:n]
        for i in top_start:
            if not np.isfinite(starts_ok[i]):
                continue
            for j in top_end:
                if j < i or j - i + 1 > config.max_answer_length:
                    continue
                score = float(s[lo + i] + e[lo + j])
                if score > best_score:
                    best_score, best_span = score, (window.first_token + i, window.first_token + j)
    if best_span is None:
        return "", float("inf")
    text = context[offsets[best_span[0]][0] : offsets[best_span[1]][1]]
    return text, null - best_score


@dataclass
class SquadEvalInfo:
    examples: list[SquadExample]
    contexts: list[str]
    windows: list[Window]
    offsets: list[list[tuple[int, int]]]
    # The longest evaluation sequence: logits are padded to it so that batches concatenate.
    width: int


class QuestionAnswering(Task):
    """Start and end cross-entropy over the sequence, averaged over the two (BERT's run_squad loss)."""

    @classmethod
    def check_config(cls, config) -> None:
        for key in ("doc_stride", "max_query_length", "max_answer_length", "n_best_size"):
            if config[key] < 1:
                raise ConfigError(f"task.{key}={config[key]}: must be at least 1")

    @classmethod
    def prepare_data(cls, config: SquadConfig, data_cfg, tokenizer: Tokenizer, vocab: Vocab) -> TaskData:
        examples, contexts = read_squad(data_cfg.train_file, training=True)
        examples = limit(examples, data_cfg.max_train_samples, "training questions")
        train, _, _ = build_features(
            examples, contexts, tokenizer, vocab, config, data_cfg.max_seq_len, True, data_cfg.train_file
        )
        validation, info = None, None
        if data_cfg.validation_file:
            examples, contexts = read_squad(data_cfg.validation_file)
            examples = limit(examples, data_cfg.max_eval_samples, "evaluation questions")
            validation, windows, offsets = build_features(
                examples, contexts, tokenizer, vocab, config, data_cfg.max_seq_len, False, data_cfg.validation_file
            )
            width = max(len(f["input_ids"]) for f in validation)
            info = SquadEvalInfo(examples, contexts, windows, offsets, width)
        return TaskData(train, validation, eval_info=info)

    def __init__(self, config: SquadConfig, model: nn.Module, vocab: Vocab, data: TaskData):
        super().__init__(config, model, vocab, data)
        self.head = SpanHead(model)

    def target_counts(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        return {"task": int(batch["input_ids"].shape[0])}

    def forward(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        reps = encode(model, batch)
        start, end = self.head(reps.hidden)  # 2 x (B, T)
        padding = batch["attention_mask"] == 0
        start = start.float().masked_fill(padding, _NEVER)
        end = end.float().masked_fill(padding, _NEVER)
        loss_sum = (
            F.cross_entropy(start, batch["start_positions"], reduction="sum")
            + F.cross_entropy(end, batch["end_positions"], reduction="sum")
        ) / 2
        outputs = {}
        if not self.training and "feature_index" in batch:
            # Batches differ in width; pad to a fixed one so evaluation can concatenate them.
            width = max(self.eval_info.width, start.shape[1])
            outputs = {
                "start_logits": F.pad(start.detach(), (0, width - start.shape[1]), value=_NEVER),  # (B, width)
                "end_logits": F.pad(end.detach(), (0, width - end.shape[1]), value=_NEVER),  # (B, width)
                "feature_index": batch["feature_index"],
            }
        return ObjectiveOutput(loss_sums={"task": loss_sum}, outputs=outputs)

    def finish_evaluation(self, outputs: dict[str, torch.Tensor]) -> dict[str, float]:
        info: SquadEvalInfo = self.eval_info
        order = outputs["feature_index"].argsort()
        rows = outputs["feature_index"][order].tolist()
        start, end = outputs["start_logits"][order].numpy(), outputs["end_logits"][order].numpy()
        by_example: dict[int, list[int]] = {}
        for position, feature in enumerate(rows):
            by_example.setdefault(info.windows[feature].example, []).append(position)
        windows = [info.windows[f] for f in rows]
        predictions, spans, odds_of, null_odds = {}, {}, {}, {}
        tau = self.config.null_score_diff_threshold
        for example_index, feature_rows in by_example.items():
            example = info.examples[example_index]
            context, offsets = info.contexts[example.context], info.offsets[example.context]
            text, odds = decode(start, end, windows, feature_rows, context, offsets, self.config)
            spans[example.qid] = predictions[example.qid] = text
            if self.config.version_2_with_negative:
                predictions[example.qid] = "" if odds > tau else text
                # JSON has no infinity: a question without any valid span gets a large finite score.
                odds_of[example.qid] = min(odds, 1e6)
                # Released as s_null - best span score - tau: positive exactly where "no answer" was predicted, so
                # the official script (threshold 1.0) rescoring predictions.json with it agrees with this run.
                null_odds[example.qid] = min(odds - tau, 1e6)
        golds = {e.qid: [a for a, _ in e.answers] for e in info.examples}
        self.artifacts = {"predictions.json": predictions}
        if self.config.version_2_with_negative:
            # The official keys are the official script's on the files written beside them; the search over every
            # question's best span (which may answer more than tau did) is reported under span_best_*.
            metrics = squad_evaluate(golds, predictions, null_odds) | span_threshold_search(golds, spans, odds_of)
            self.artifacts.update({"null_odds.json": null_odds, "span_predictions.json": spans})
        else:
            metrics = squad_evaluate(golds, predictions)
        self.last_metrics = metrics
        return metrics


TASKS.register("squad2", SquadConfig, cls=QuestionAnswering)(QuestionAnswering)
TASKS.register("squad1", SquadConfig, cls=QuestionAnswering)(QuestionAnswering)
