"""Questions of ``task=kbqa`` and their features: the readers (our JSONL and SimpleQuestions' TSV) and the token
rows both heads read.

JSONL: one object a line, ``{"question": ..., "subject": id, "relation": ..., "answers": [ids]}``; subject and
relation are needed for training, answers for evaluation unless subject and relation give them (the objects of that
pair in the knowledge base). SimpleQuestions (Bordes et al. 2015, ``annotated_fb_data_*.txt``): ``subject<TAB>
relation<TAB>object<TAB>question`` with ``www.freebase.com/...`` ids; the answers are every object of (subject,
relation) in the knowledge base, the row's own among them, since its question asks for that pair.

A feature is the question as one segment with the family's special tokens, ``labels`` tagging each token of the
subject's mention 1 and the other question tokens 0 (the mention found from the subject's names, ``find_mention``;
no targets when none matches), ``word_ids`` (1 + the word each token belongs to, 0 for special tokens: the tagger's
span is widened to whole words) and ``relation``, the gold relation's id.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from plm_toolkit.core.errors import DataError
from plm_toolkit.data.tokenization.characters import template_character_ids, token_strings
from plm_toolkit.tasks.base import IGNORE, template_of
from plm_toolkit.tasks.kbqa.knowledge_base import KnowledgeBase, find_mention, freebase_id

log = logging.getLogger("plm_toolkit")

FORMATS = ("auto", "jsonl", "simplequestions")


@dataclass
class Question:
    line: int
    text: str
    subject: str | None = None
    relation: str | None = None
    answers: list[str] = field(default_factory=list)


def question_format(path: str | Path, configured: str) -> str:
    """jsonl or simplequestions: as configured, or for ``auto`` by the file's suffix (.jsonl/.json: ours)."""
    if configured != "auto":
        return configured
    return "jsonl" if Path(path).suffix in (".jsonl", ".json") else "simplequestions"


def _jsonl(path: Path, number: int, line: str) -> Question:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        raise DataError(f"{path}:{number}: not a JSON object ({err.msg})") from None
    if not isinstance(row, dict) or not isinstance(row.get("question"), str) or not row["question"].strip():
        raise DataError(f'{path}:{number}: expected an object with a non-empty "question" string')
    for key in ("subject", "relation"):
        if row.get(key) is not None and not isinstance(row[key], str):
            raise DataError(f'{path}:{number}: "{key}" must be a string id')
    answers = row.get("answers") or []
    if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
        raise DataError(f'{path}:{number}: "answers" must be a list of string ids')
    subject, relation = row.get("subject"), row.get("relation")
    return Question(
        number,
        row["question"].strip(),
        freebase_id(subject) if subject else None,
        freebase_id(relation) if relation else None,
        [freebase_id(a) for a in answers],
    )


def read_questions(path: str | Path, configured_format: str = "auto") -> list[Question]:
    """The questions of a JSONL or SimpleQuestions file; a malformed line is a DataError naming file:line."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    kind = question_format(path, configured_format)
    out = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            if kind == "jsonl":
                out.append(_jsonl(path, number, line))
                continue
            fields = line.rstrip("\r\n").split("\t")
            if len(fields) != 4 or not fields[3].strip():
                raise DataError(
                    f"{path}:{number}: {len(fields)} field(s), expected SimpleQuestions' 4: subject<TAB>relation<TAB>"
                    "object<TAB>question (task.question_format=jsonl reads JSON lines)"
                )
            subject, relation, obj = (freebase_id(f.strip()) for f in fields[:3])
            out.append(Question(number, fields[3].strip(), subject, relation, [obj]))
    if not out:
        raise DataError(f"{path}: no questions")
    return out


def gold_answers(question: Question, kb: KnowledgeBase) -> list[str]:
    """The answers a prediction is checked against: the row's, with every object of its (subject, relation)."""
    found = kb.objects.get((question.subject, question.relation), []) if question.subject else []
    return list(dict.fromkeys([*question.answers, *found]))


def check_training(questions: list[Question], kb: KnowledgeBase, relations: list[str], path) -> None:
    """Refuse a training question without a subject and relation, or whose subject or relation the knowledge base
    lacks, naming its line."""
    known = set(relations)
    for q in questions:
        if not q.subject or not q.relation:
            raise DataError(f"{path}:{q.line}: a training question needs its subject and relation")
        if q.subject not in kb.relations_of:
            raise DataError(
                f"{path}:{q.line}: subject {q.subject!r} is not a subject of the knowledge base (task.kb_triples)"
            )
        if q.relation not in known:
            raise DataError(f"{path}:{q.line}: relation {q.relation!r} is not among the knowledge base's relations")


def count_unanswerable(questions: list[Question], kb: KnowledgeBase, path) -> None:
    """Warn, with a count and the first line, about evaluation questions that count as wrong whatever is predicted:
    those whose gold subject the knowledge base lacks, and those with no answers to check against."""
    outside = [q for q in questions if q.subject and q.subject not in kb]
    if outside:
        log.warning(
            "%s: %d question(s) whose gold subject is not in the knowledge base count as wrong (first: line %d)",
            path,
            len(outside),
            outside[0].line,
        )
    unanswerable = [q for q in questions if not gold_answers(q, kb)]
    if unanswerable:
        log.warning(
            "%s: %d question(s) have no answers and no (subject, relation) in the knowledge base to take them from; "
            "they count as wrong (first: line %d)",
            path,
            len(unanswerable),
            unanswerable[0].line,
        )


@dataclass
class Encoded:
    """What decoding needs of one evaluation question beyond its tensors."""

    question: Question
    # Character span of each word (``word_ids`` - 1 indexes it).
    word_spans: list[tuple[int, int]]
    # First and last word of the gold mention, or None.
    gold_words: tuple[int, int] | None


def _word_spans(encoding, count: int) -> tuple[list[int], list[tuple[int, int]]]:
    """Per token, 1 + its word index (0: none); and each word's character span."""
    ids, spans, previous = [], [], None
    for word, (start, end) in zip(encoding.word_ids[:count], encoding.offsets[:count], strict=True):
        if word is None or word != previous:
            spans.append((start, end))
        else:
            spans[-1] = (spans[-1][0], end)
        previous = word
        ids.append(len(spans))
    return ids, spans


def build_features(
    questions: list[Question],
    kb: KnowledgeBase,
    relation_ids: dict[str, int],
    tokenizer: Tokenizer,
    max_seq_len: int,
    threshold: float,
    with_index: bool,
    characters: int = 0,
) -> tuple[list[dict[str, Any]], list[Encoded], int]:
    """(features, what decoding needs of each, the number of questions with a known subject whose mention no name
    matched)."""
    template = template_of(tokenizer, pair=False)
    budget = max_seq_len - template.num_special
    encodings = tokenizer.encode_batch([q.text for q in questions], add_special_tokens=False)
    features, encoded, unmatched = [], [], 0
    for index, (question, encoding) in enumerate(zip(questions, encodings, strict=True)):
        count = min(len(encoding.ids), budget)
        word_ids, spans = _word_spans(encoding, count)
        names = kb.names.get(question.subject, []) if question.subject else []
        mention = find_mention(question.text, names, threshold) if names else None
        labels, gold_words = [IGNORE] * count, None
        if mention is not None:
            inside = [start < mention[1] and end > mention[0] for start, end in encoding.offsets[:count]]
            labels = [int(flag) for flag in inside]
            chosen = [word_ids[i] - 1 for i in range(count) if inside[i]]
            gold_words = (min(chosen), max(chosen)) if chosen else None
        elif question.subject in kb:
            unmatched += 1
        ids, types, starts = template.assemble(encoding.ids[:count])
        padded_labels, padded_words = [IGNORE] * len(ids), [0] * len(ids)
        padded_labels[starts["A"] : starts["A"] + count] = labels
        padded_words[starts["A"] : starts["A"] + count] = word_ids
        feature = {
            "input_ids": ids,
            "token_type_ids": types,
            "labels": padded_labels,
            "word_ids": padded_words,
            "relation": relation_ids.get(question.relation, IGNORE),
        }
        if characters:
            strings = token_strings(encoding, (question.text,))[:count]
            feature["char_ids"] = template_character_ids(
                template.pieces, tokenizer.id_to_token, strings, (), characters
            )
        if with_index:
            feature["index"] = index
        features.append(feature)
        encoded.append(Encoded(question, spans, gold_words))
    return features, encoded, unmatched
