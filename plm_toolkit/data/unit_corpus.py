"""A corpus tokenized with its knowledge units: every sentence's token ids and, beside them, each token's join code
(``data/units.py``), cached like the plain tokenized corpus and keyed on everything that changes the units.

Where the units come from (the objective's keys, see ``objectives/knowledge_masking.py``):
- words: ``word_segmenter`` (regex: BERT's split; jieba: Chinese words), or the text's own spaces when
  ``presegmented``;
- phrases: the ``[[...]]`` marks of pre-segmented text, a ``phrase_lexicon`` file, or, when neither is given,
  phrases learned from the training corpus by collocation scores (``data/collocations.py``, cached);
- entities: the ``{{...}}`` marks, an ``entity_gazetteer`` file, and an ``entity_tagger`` (a task=ner checkpoint,
  whose tagger the caller builds and passes in ``TaggedSources``), in that order of precedence where they overlap.
How many units of each kind were found is logged and kept in ``<cache file>.units.json``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
from tokenizers import Tokenizer

from plm_toolkit.data.collocations import learn_phrases
from plm_toolkit.data.corpus import (
    Documents,
    cache_root,
    choice,
    read_documents,
    split_sentences,
    stable_hash,
)
from plm_toolkit.data.template import Template
from plm_toolkit.data.units import NONE, Lexicon, SentenceUnits, parse_presegmented, read_lexicon, split_words
from plm_toolkit.errors import DataError

logger = logging.getLogger(__name__)
# Bump when a change here or in data/units.py changes what the cached files hold.
FORMAT_VERSION = 1
_BATCH = 256  # documents per map batch


def _file_digest(*paths: Path) -> str:
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
    return digest.hexdigest()


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


@dataclass(frozen=True)
class TaggedSources:
    """The units' sources (``config``: the objective config) with the entity tagger that its ``entity_tagger`` key
    names, built by the caller (``tasks/entity_tagger.py``): a callable from lists of words to entity spans over
    word indices, whose ``folder`` holds the weights that key the cache. Reads as ``config`` otherwise."""

    config: Any
    tagger: Callable[[list[list[str]]], list[list[tuple[int, int]]]]

    def __getattr__(self, name: str) -> Any:
        if name in ("config", "tagger"):  # not set yet (unpickling)
            raise AttributeError(name)
        return getattr(self.config, name)


class UnitFinder:
    """Finds the units of one line of text from the configured sources (``sources``: the objective config)."""

    def __init__(self, sources: Any, documents: Documents, data_cfg: Any):
        self.segmenter = choice(sources.word_segmenter)
        self.presegmented = bool(sources.presegmented)
        self.source = documents.source
        self.phrases: Lexicon | None = None
        self.phrase_origin = "none"
        if sources.phrase_lexicon:
            ignore = choice(sources.phrase_lexicon_case) == "ignore"
            self.phrases = read_lexicon(sources.phrase_lexicon, "objective.phrase_lexicon", self.segmenter, ignore, 2)
            self.phrase_origin = f"lexicon {sources.phrase_lexicon}"
        elif self.presegmented:
            self.phrase_origin = "[[...]] marks"
        elif sources.collocation_passes > 0:
            # Learned from the training split, whichever split is being tokenized.
            self.phrases = self._collocations(sources, read_documents(data_cfg, "train"), data_cfg)
            self.phrase_origin = "collocations"
        self.gazetteer: Lexicon | None = None
        if sources.entity_gazetteer:
            ignore = choice(sources.entity_gazetteer_case) == "ignore"
            self.gazetteer = read_lexicon(
                sources.entity_gazetteer, "objective.entity_gazetteer", self.segmenter, ignore, 1
            )
        if not (sources.entity_gazetteer or sources.entity_tagger or self.presegmented):
            logger.warning(
                "no entity source (objective.entity_gazetteer, objective.entity_tagger or pre-segmented {{...}} "
                "marks): the entity stage masks phrases and words only"
            )
        self.tagger = getattr(sources, "tagger", None)
        if sources.entity_tagger and self.tagger is None:
            raise ValueError(
                f"entity_tagger={sources.entity_tagger} names a tagger that was not built; pass the sources as "
                "TaggedSources(sources, tagger) (tasks/entity_tagger.py: with_entity_tagger)"
            )
        self.key = stable_hash(
            FORMAT_VERSION,
            self.segmenter,
            self.presegmented,
            self.phrase_origin,
            self._lexicon_key(self.phrases),
            self._lexicon_key(self.gazetteer),
            _file_digest(self.tagger.folder / "model.safetensors", self.tagger.folder / "objective.safetensors")
            if self.tagger
            else None,
        )

    @staticmethod
    def _lexicon_key(lexicon: Lexicon | None):
        return None if lexicon is None else (lexicon.ignore_case, sorted(lexicon.entries))

    def _collocations(self, sources: Any, documents: Documents, data_cfg: Any) -> Lexicon:
        """Phrases learned from the training documents, cached as one phrase per line (words joined by spaces)."""
        settings = (sources.collocation_min_count, float(sources.collocation_threshold), sources.collocation_passes)
        key = stable_hash(documents.fingerprint, self.segmenter, settings, FORMAT_VERSION)
        path = cache_root(data_cfg) / "units" / f"phrases-{key}.txt"
        if not path.is_file():

            def sentences():
                for line in _lines(documents):
                    for sentence in split_sentences(line):
                        yield [sentence[s:e] for s, e in split_words(sentence, self.segmenter)]

            found = learn_phrases(sentences, *settings)
            _atomic_write(path, "".join(" ".join(p) + "\n" for p in sorted(found)))
        return Lexicon([line.split(" ") for line in path.read_text(encoding="utf-8").splitlines()])

    def sentences(self, line: str) -> list[SentenceUnits]:
        """The line's sentences with their words, marked units and lexicon matches (the tagger runs later, on a
        whole batch of sentences)."""
        if self.presegmented:
            plain, words, marked = parse_presegmented(line, self.source)
        else:
            plain, words, marked = line, None, {"phrase": [], "entity": []}
        out, cursor = [], 0
        for sentence in split_sentences(plain):
            start = plain.find(sentence, cursor)
            end = cursor = start + len(sentence)
            if words is None:
                spans = [(s + start, e + start) for s, e in split_words(sentence, self.segmenter)]
            else:
                spans = [(s, e) for s, e in words if start <= s and e <= end]
            first = 0 if words is None else next((i for i, (s, _) in enumerate(words) if s >= start), len(words))
            units = SentenceUnits(sentence, [(s - start, e - start) for s, e in spans])
            for level, found in marked.items():
                clipped = [(max(a, first) - first, min(b, first + len(spans)) - first) for a, b in found]
                units.add(level, [(a, b) for a, b in clipped if a < b])
            texts = units.word_texts()
            if self.gazetteer is not None:
                units.add("entity", self.gazetteer.match(texts))
            if self.phrases is not None:
                units.add("phrase", self.phrases.match(texts))
            out.append(units)
        return out

    def tag(self, sentences: list[SentenceUnits]) -> None:
        """Add the tagger's entities to every sentence, then make the levels nest."""
        if self.tagger is not None:
            for units, found in zip(sentences, self.tagger([u.word_texts() for u in sentences]), strict=True):
                units.add("entity", found)
        for units in sentences:
            units.resolve()


def _lines(documents: Documents):
    for batch in documents.dataset.iter(batch_size=1000):
        for document in batch["text"]:
            yield from (line for line in document.splitlines() if line.strip())


PLURAL = {"phrase": "phrases", "entity": "entities"}


class UnitCounts:
    """Occurrences and distinct entries of each kind of unit, summed over map batches."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.distinct: dict[str, Counter[str]] = {"phrase": Counter(), "entity": Counter()}

    def add(self, units: SentenceUnits) -> None:
        texts = units.word_texts()
        self.counts["sentences"] += 1
        self.counts["words"] += len(texts)
        self.counts["words_with_letters"] += sum(any(c.isalpha() for c in w) for w in texts)
        for level, spans in (("phrase", units.phrases), ("entity", units.entities)):
            self.counts[PLURAL[level]] += len(spans)
            self.distinct[level].update(" ".join(texts[s:e]) for s, e in spans)

    def summary(self) -> dict[str, int]:
        return {
            **{k: self.counts[k] for k in ("sentences", "words", "words_with_letters", "phrases", "entities")},
            "distinct_phrases": len(self.distinct["phrase"]),
            "distinct_entities": len(self.distinct["entity"]),
        }

    def most_common(self, n: int = 20) -> dict[str, list]:
        return {f"top_{PLURAL[k]}": counter.most_common(n) for k, counter in self.distinct.items()}


def unit_summary(cache_file: str | Path) -> dict:
    """The unit counts (and the most frequent phrases and entities) kept beside a cached unit corpus."""
    path = Path(cache_file).with_name(Path(cache_file).name + ".units.json")
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def tokenize_with_units(documents: Documents, tokenizer: Tokenizer, data_cfg: Any, sources: Any) -> datasets.Dataset:
    """One row per document with at least one sentence: ``sentences`` (token-id lists, no specials) and ``units``
    (the join code of every token), cached under ``<cache_dir>/tokenized/``."""
    finder = UnitFinder(sources, documents, data_cfg)
    key = stable_hash(documents.fingerprint, tokenizer.to_str(), finder.key)
    path = cache_root(data_cfg) / "tokenized" / f"units-{key}.arrow"
    stats_path = path.with_name(path.name + ".units.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    counts = UnitCounts()

    def tokenize(batch: dict[str, list]) -> dict[str, list]:
        texts = batch["text"]
        per_document = [
            [u for line in text.splitlines() if line.strip() for u in finder.sentences(line)] for text in texts
        ]
        flat = [u for sentences in per_document for u in sentences]
        finder.tag(flat)
        encodings = tokenizer.encode_batch([u.text for u in flat], add_special_tokens=False)
        out: dict[str, list] = {"sentences": [], "units": []}
        start = 0
        for sentences in per_document:
            document_ids, document_codes = [], []
            for units, encoding in zip(sentences, encodings[start : start + len(sentences)], strict=True):
                counts.add(units)
                if encoding.ids and units.words:
                    document_ids.append(encoding.ids)
                    document_codes.append(units.token_codes(encoding.offsets))
            start += len(sentences)
            if document_ids:
                out["sentences"].append(document_ids)
                out["units"].append(document_codes)
        return out

    tokenized = documents.dataset.map(
        tokenize,
        batched=True,
        batch_size=_BATCH,
        remove_columns=documents.dataset.column_names,
        features=datasets.Features({"sentences": [[datasets.Value("int32")]], "units": [[datasets.Value("int8")]]}),
        cache_file_name=str(path),
        new_fingerprint=key,
        desc="finding knowledge units",
    )
    if counts.counts:
        _atomic_write(stats_path, json.dumps({**counts.summary(), **counts.most_common()}, ensure_ascii=False))
    summary = unit_summary(path)
    if summary and summary["words_with_letters"] == 0:
        raise DataError(
            f"{documents.source} has no letters (only digits, punctuation or symbols); knowledge masking needs text "
            "to find words, phrases and entities in"
        )
    if len(tokenized) == 0:
        raise DataError(f"{documents.source} has no text; expected documents separated by blank lines")
    logger.info(
        "knowledge units of %s: %s (phrases from %s%s)",
        documents.source,
        ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in summary.items() if not k.startswith("top_")),
        finder.phrase_origin,
        f", {len(finder.phrases)} phrase types" if finder.phrases is not None else "",
    )
    return tokenized


# --- packing helpers (data/pretraining.py's full sentences) ------------------------------------------------


def unit_documents(tokenized: datasets.Dataset, batch_size: int = 256):
    """The documents of a unit corpus, each sentence a list of (token id, join code) pairs."""
    for batch in tokenized.iter(batch_size=batch_size):
        for sentences, codes in zip(batch["sentences"], batch["units"], strict=True):
            yield [list(zip(ids, units, strict=True)) for ids, units in zip(sentences, codes, strict=True)]


def wrap_with_codes(template: Template, block: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """A block of (id, join code) pairs wrapped by the tokenizer's template; its special tokens join no unit."""
    ids, _, starts = template.assemble([i for i, _ in block])
    codes = [NONE] * len(ids)
    codes[starts["A"] : starts["A"] + len(block)] = [c for _, c in block]
    return list(zip(ids, codes, strict=True))
