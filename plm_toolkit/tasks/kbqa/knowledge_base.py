"""The knowledge base of ``task=kbqa``: triples and names from TSV files, and the two string stages of the pipeline,
finding a subject's mention in a question (the tagger's training labels) and candidate entities for a mention.

Names are compared as their words, case and accents aside (``normalize``: "Côte d'Ivoire" -> "cote d ivoire"). A
mention's candidates are the entities one of whose names equals it so normalized (exact, score 1) and those whose
name is close to it (fuzzy: the similarity ratio of the two strings, at least ``threshold``), as BuboQA and Mohammed
et al. (2018) link SimpleQuestions' mentions. The fuzzy search looks at the names that share the most character
trigrams with the mention and scores them with ``difflib``'s ratio (2 x matching characters / total length), so it
costs little beyond the index even for a large knowledge base.

Freebase ids as SimpleQuestions writes them (``www.freebase.com/m/0abc``, ``www.freebase.com/people/person/place``)
become BuboQA's ``fb:m.0abc`` and ``fb:people.person.place`` wherever they are read, so the FB2M/FB5M subsets
(several objects in one field, space-separated) and the questions name the same ids.
"""

from __future__ import annotations

import difflib
import logging
import re
import unicodedata
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from plm_toolkit.core.errors import DataError

log = logging.getLogger("plm_toolkit")

FREEBASE = "www.freebase.com/"
WORD = re.compile(r"\w+")
# Names looked at closely per fuzzy search: those sharing the most trigrams with the mention.
SHORTLIST = 64


def freebase_id(value: str) -> str:
    """``www.freebase.com/m/0abc`` -> ``fb:m.0abc`` (BuboQA's form); any other value as it is."""
    if value.startswith(FREEBASE):
        return "fb:" + value[len(FREEBASE) :].replace("/", ".")
    return value


def fold(text: str) -> str:
    """Casefolded, without accents (NFKD's combining marks dropped)."""
    return "".join(c for c in unicodedata.normalize("NFKD", text.casefold()) if not unicodedata.combining(c))


def words(text: str) -> list[tuple[int, int]]:
    """(start, end) character span of every word of ``text`` (runs of letters, digits and underscores)."""
    return [match.span() for match in WORD.finditer(text)]


def normalize(text: str) -> str:
    """What names are compared as: the folded words joined by single spaces."""
    return " ".join(fold(text[start:end]) for start, end in words(text))


@dataclass
class KnowledgeBase:
    # (subject, relation) -> objects, in file order.
    objects: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    # subject -> its relations, in file order.
    relations_of: dict[str, list[str]] = field(default_factory=dict)
    # id -> names, the first one its main name.
    names: dict[str, list[str]] = field(default_factory=dict)
    # id -> number of triples it takes part in: the popularity that breaks ties between candidates.
    degree: Counter = field(default_factory=Counter)

    @property
    def relations(self) -> list[str]:
        """Every relation, sorted: the relation classifier's labels."""
        return sorted({relation for _, relation in self.objects})

    def __contains__(self, entity: str) -> bool:
        return entity in self.degree


def _tsv_rows(path: Path, key: str):
    """(line number, fields) of the non-blank lines of a UTF-8 TSV file."""
    if not path.is_file():
        raise DataError(f"{path}: no such file (task.{key})")
    with open(path, encoding="utf-8") as handle:
        try:
            for number, line in enumerate(handle, start=1):
                line = line.rstrip("\r\n")
                if line.strip():
                    yield number, line.split("\t")
        except UnicodeDecodeError as err:
            raise DataError(f"{path}:{number + 1}: not UTF-8 text ({err.reason}) (task.{key})") from None


def read_kb(triples_path: str | Path, names_path: str | Path) -> KnowledgeBase:
    """The knowledge base of a triples file (``subject<TAB>relation<TAB>object``) and a names file (``id<TAB>name``,
    one row per name). A triple row without three fields is a DataError naming file:line; name rows for ids that
    no triple mentions are left out with one counted warning."""
    kb = KnowledgeBase()
    objects: dict[tuple[str, str], list[str]] = defaultdict(list)
    relations_of: dict[str, dict[str, None]] = defaultdict(dict)
    path = Path(triples_path)
    for number, fields in _tsv_rows(path, "kb_triples"):
        if len(fields) != 3 or not all(f.strip() for f in fields):
            raise DataError(
                f"{path}:{number}: {len(fields)} field(s){' (one empty)' if len(fields) == 3 else ''}, expected 3: "
                "subject_id<TAB>relation<TAB>object_id (task.kb_triples)"
            )
        subject, relation, value = (f.strip() for f in fields)
        subject, relation = freebase_id(subject), freebase_id(relation)
        # FB2M/FB5M list several objects in one field.
        values = value.split() if value.startswith(FREEBASE) else [value]
        for obj in map(freebase_id, values):
            objects[subject, relation].append(obj)
            relations_of[subject][relation] = None
            kb.degree[subject] += 1
            kb.degree[obj] += 1
    if not objects:
        raise DataError(f"{path}: no triples (task.kb_triples)")
    kb.objects = dict(objects)
    kb.relations_of = {subject: list(relations) for subject, relations in relations_of.items()}
    names: dict[str, list[str]] = defaultdict(list)
    path = Path(names_path)
    absent, first_absent = 0, None
    for number, fields in _tsv_rows(path, "kb_names"):
        if len(fields) != 2 or not fields[1].strip():
            raise DataError(f"{path}:{number}: {len(fields)} field(s), expected 2: id<TAB>name (task.kb_names)")
        entity, name = freebase_id(fields[0].strip()), fields[1].strip()
        if entity not in kb:
            absent += 1
            first_absent = first_absent or f"{path}:{number} ({entity})"
            continue
        if name not in names[entity]:
            names[entity].append(name)
    if absent:
        log.warning(
            "%s: %d name row(s) for ids that no triple mentions were left out (first: %s)", path, absent, first_absent
        )
    if not names:  # every question would go unmatched and score 0, with warnings that blame the questions
        what = f"none of its {absent} row(s) names an id of task.kb_triples" if absent else "it has no rows"
        raise DataError(f"{path}: names no entity of the knowledge base (task.kb_names): {what}; expected id<TAB>name")
    kb.names = dict(names)
    return kb


def find_mention(question: str, names: list[str], threshold: float) -> tuple[int, int] | None:
    """Character span of the subject's mention in ``question``: the longest of ``names`` found there as whole words
    (case and accents aside); else the run of words most similar to one of them, when its ratio reaches
    ``threshold`` (a misspelt or shortened name); else None."""
    spans = words(question)
    folded = [fold(question[start:end]) for start, end in spans]
    keys = sorted({normalize(name) for name in names} - {""}, key=lambda k: (-len(k), k))
    for key in keys:
        target = key.split(" ")
        for i in range(len(folded) - len(target) + 1):
            if folded[i : i + len(target)] == target:
                return spans[i][0], spans[i + len(target) - 1][1]
    best, found = threshold, None
    longest = max((len(k.split(" ")) for k in keys), default=0) + 1
    for i in range(len(folded)):
        for j in range(i + 1, min(len(folded), i + longest) + 1):
            text = " ".join(folded[i:j])
            for key in keys:
                ratio = difflib.SequenceMatcher(None, text, key, autojunk=False).ratio()
                if ratio > best or (ratio == best and found is None):
                    best, found = ratio, (spans[i][0], spans[j - 1][1])
    return found


def _trigrams(key: str) -> set[str]:
    padded = f"  {key} "
    return {padded[i : i + 3] for i in range(len(padded) - 2)}


class NameIndex:
    """Entities by name: exact lookup of the normalized name, and a character-trigram index for fuzzy search."""

    def __init__(self, kb: KnowledgeBase):
        self.kb = kb
        by_key: dict[str, set[str]] = defaultdict(set)
        for entity, names in kb.names.items():
            for name in names:
                key = normalize(name)
                if key:
                    by_key[key].add(entity)
        self.keys = sorted(by_key)
        self.entities = [sorted(by_key[key]) for key in self.keys]
        self.exact = {key: i for i, key in enumerate(self.keys)}
        postings: dict[str, list[int]] = defaultdict(list)
        for i, key in enumerate(self.keys):
            for gram in _trigrams(key):
                postings[gram].append(i)
        self.postings = dict(postings)

    def candidates(self, mention: str, threshold: float, limit: int) -> list[tuple[str, float]]:
        """Up to ``limit`` (entity, score) pairs, best first: score 1 for a name equal to the mention (normalized),
        else the similarity ratio of the closest name when it reaches ``threshold``; ties by popularity (degree)."""
        key = normalize(mention)
        if not key:
            return []
        scores: dict[str, float] = {}
        if key in self.exact:
            scores = dict.fromkeys(self.entities[self.exact[key]], 1.0)
        shared: Counter = Counter()
        for gram in _trigrams(key):
            shared.update(self.postings.get(gram, ()))
        for i, _ in sorted(shared.items(), key=lambda item: (-item[1], item[0]))[:SHORTLIST]:
            ratio = difflib.SequenceMatcher(None, key, self.keys[i], autojunk=False).ratio()
            if ratio >= threshold:
                for entity in self.entities[i]:
                    scores[entity] = max(scores.get(entity, 0.0), ratio)
        ranked = sorted(scores.items(), key=lambda item: (-item[1], -self.kb.degree[item[0]], item[0]))
        return ranked[:limit]
