"""SQuAD v1.1 and v2.0 files (Rajpurkar et al. 2016, 2018) turned into the windowed features of BERT's run_squad
(Devlin et al. 2019, sections 4.2 and 4.3); the task that trains on them and decodes answers is ``squad.py``.

The question is segment A and the context segment B, laid out by the tokenizer's own template (BERT:
``[CLS] q [SEP] c [SEP]``; XLNet puts its summary token last). A context longer than the sequence is cut into
windows whose starts are ``doc_stride`` tokens apart; answers are mapped to tokens through the tokenizer's
character offsets, and a window that does not hold the whole answer (or an unanswerable question) points start and
end at the summary token. Each token remembers the window where it has the most context, which is the only window
decoding may start an answer in.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from plm_toolkit.core.errors import ConfigError, DataError
from plm_toolkit.data.sources.user_files import json_type, read_json
from plm_toolkit.data.tokenization.characters import template_character_ids, token_strings
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.tasks.base import Template, template_of

log = logging.getLogger("plm_toolkit")


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


JSON_TYPES = {str: "a string", int: "an integer", list: "an array", bool: "true/false", dict: "an object"}


def _get(node, key: str, kind: type, path: Path, where: str):
    if not isinstance(node, dict) or key not in node:
        raise DataError(f"{path}: {where}: missing {key!r}; expected the official SQuAD JSON layout")
    value = node[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    # JSON's true/false is a Python int too: an answer_start of true is no position.
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in kinds):
        expected = " or ".join(JSON_TYPES[k] for k in kinds)
        raise DataError(f"{path}: {where}.{key}: expected {expected}, found {json_type(value)}")
    return value


def read_squad(path: str | Path, training: bool = False) -> tuple[list[SquadExample], list[str]]:
    """Questions and distinct contexts of an official SQuAD JSON file (v1.1 or v2.0).

    A question marked ``is_impossible: false`` without answers contradicts itself: a training file is refused
    (naming its id); an evaluation file keeps it as unanswerable, as the official script scores it, and counts it.
    """
    path = Path(path).expanduser()
    dataset = read_json(path)
    examples, contexts, contradictions = [], [], []
    seen: dict[str, str] = {}  # question id -> where it first appears
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
                impossible = _get(qa, "is_impossible", bool, path, where) if "is_impossible" in qa else False
                qid = str(_get(qa, "id", (str, int), path, where))
                if qid in seen:
                    raise DataError(
                        f"{path}: {where} has id={qid}, as {seen[qid]} does; SQuAD's evaluation scores answers by "
                        "question id, so each question needs an id of its own"
                    )
                seen[qid] = where
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
    characters: int = 0,
) -> tuple[list[dict], list[Window], list[list[tuple[int, int]]]]:
    """Features (input_ids, token_type_ids, start/end positions, feature_index), their windows, and each
    context's token offsets. Training questions whose answer_start does not match their text are skipped and
    counted, as the reference implementation does. With ``characters`` each feature also gets ``char_ids``."""
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
            if characters:
                query_text = token_strings(question, [example.question])[: len(query)]
                context_text = token_strings(context_encodings[example.context], [contexts[example.context]])
                feature["char_ids"] = template_character_ids(
                    template.pieces, tokenizer.id_to_token, query_text, context_text[first : first + length], characters
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
