"""A corpus tokenized with its knowledge units: every sentence's token ids and, beside them, each token's join code
(``data/units/knowledge.py``), written into the token store by its workers (``data/store/shard_worker.py``, unit
``units``) with the ``UnitEncoder`` they are handed (``data/store/side_channels.py``).

Where the units come from (the objective's keys, see ``objectives/knowledge_masking.py``):
- words: ``word_segmenter`` (regex: BERT's split; jieba: Chinese words), or the text's own spaces when
  ``presegmented``;
- phrases: the ``[[...]]`` marks of pre-segmented text, a ``phrase_lexicon`` file, or, when neither is given,
  phrases learned from the training corpus by collocation scores (``data/units/collocations.py``,
  ``data/units/store.py``);
- entities: the ``{{...}}`` marks, an ``entity_gazetteer`` file, and an ``entity_tagger`` (a task=ner checkpoint,
  whose tagger the caller builds and passes in ``TaggedSources``), in that order of precedence where they overlap.

This module runs in the store's worker processes: it imports neither torch nor datasets.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plm_toolkit.data.sources.documents import split_sentences
from plm_toolkit.data.sources.piece_reader import read_piece
from plm_toolkit.data.sources.pieces import Piece, Source
from plm_toolkit.data.store.token_store import write_json
from plm_toolkit.data.units.collocations import SPILL_ENTRIES, Pair, SpilledCounts, sentence_units
from plm_toolkit.data.units.knowledge import Lexicon, SentenceUnits, parse_presegmented, split_words


@dataclass(frozen=True)
class TaggedSources:
    """The units' sources (``config``: the objective config) with the entity tagger that its ``entity_tagger`` key
    names, built by the caller (``tasks/entity_tagger.py``): a callable from lists of words to entity spans over
    word indices, whose ``folder`` holds the weights that key the store. Reads as ``config`` otherwise."""

    config: Any
    tagger: Callable[[list[list[str]]], list[list[tuple[int, int]]]]

    def __getattr__(self, name: str) -> Any:
        if name in ("config", "tagger"):  # not set yet (unpickling)
            raise AttributeError(name)
        return getattr(self.config, name)


# What builds the tagger that objective.entity_tagger names: registered by ``tasks/entity_tagger.py`` when the
# catalog loads the tasks (a tagger is a fine-tuned task=ner checkpoint, far above the data floor), so that the data
# entry point builds it without importing the task code.
_ENTITY_TAGGER_FACTORY: list[Callable[[str], Any]] = []


def register_entity_tagger(factory: Callable[[str], Any]) -> Callable[[str], Any]:
    """Make ``factory(path)`` the builder of the tagger that objective.entity_tagger names."""
    _ENTITY_TAGGER_FACTORY[:] = [factory]
    return factory


def tagged_sources(units: Any) -> Any:
    """``units`` with the entity tagger that its ``entity_tagger`` key names (``TaggedSources``), or ``units`` itself
    when it names none."""
    if units is None or not getattr(units, "entity_tagger", None) or isinstance(units, TaggedSources):
        return units
    if not _ENTITY_TAGGER_FACTORY:
        raise RuntimeError("no entity tagger is registered: plm_toolkit.core.catalog.load_all() imports it")
    return TaggedSources(units, _ENTITY_TAGGER_FACTORY[0](units.entity_tagger))


class UnitFinder:
    """Finds the units of one line of text: its words (``segmenter``, or the spaces of ``presegmented`` text), the
    marked units, the ``phrases`` and ``gazetteer`` matches, and the ``tagger``'s entities (``tag``). ``source``
    names the file read, in the message about broken marks."""

    def __init__(
        self,
        segmenter: str,
        presegmented: bool,
        phrases: Lexicon | None,
        gazetteer: Lexicon | None,
        tagger: Callable | None = None,
        source: str = "",
    ):
        self.segmenter, self.presegmented, self.source = segmenter, presegmented, source
        self.phrases, self.gazetteer, self.tagger = phrases, gazetteer, tagger

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


PLURAL = {"phrase": "phrases", "entity": "entities"}
SCALARS = ("sentences", "words", "words_with_letters", "phrases", "entities")


class UnitCounts:
    """Occurrences and distinct entries of each kind of unit, summed over sentences (and over shards: ``merge``)."""

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

    def state(self) -> dict:
        return {"counts": dict(self.counts), "distinct": {k: dict(v) for k, v in self.distinct.items()}}

    def merge(self, state: dict) -> None:
        self.counts.update(state["counts"])
        for level, counts in state["distinct"].items():
            self.distinct[level].update(counts)

    def summary(self, top: int = 20) -> dict:
        """The counts, how many distinct phrases and entities, and the ``top`` most frequent of each (ties in
        alphabetical order)."""
        out: dict[str, Any] = {k: self.counts[k] for k in SCALARS}
        for level, counter in self.distinct.items():
            out[f"distinct_{PLURAL[level]}"] = len(counter)
        for level, counter in self.distinct.items():
            ranked = sorted(counter.items(), key=lambda item: (-item[1], item[0]))[:top]
            out[f"top_{PLURAL[level]}"] = [list(item) for item in ranked]
        return out


def counts_file(stem: Path) -> Path:
    """Where a shard's unit counts are kept (written before its index: a whole shard has them)."""
    return stem.with_name(stem.name + ".units.json")


def write_counts(stem: Path, counts: UnitCounts) -> None:
    write_json(counts_file(stem), counts.state())


def encode_units(batch: list[tuple[str, bool]], writer, tokenizer, finder: UnitFinder, counts: UnitCounts) -> None:
    """Write the sentences of ``batch`` ((text, ends) of documents or their fragments) with their join codes: each
    sentence tokenized alone, as the sentence layouts are; a sentence without a token or a word is left out, and a
    document without a sentence."""
    per_text = [[u for line in text.splitlines() if line.strip() for u in finder.sentences(line)] for text, _ in batch]
    flat = [units for sentences in per_text for units in sentences]
    finder.tag(flat)
    encodings = iter(tokenizer.encode_batch([u.text for u in flat], add_special_tokens=False))
    for (_, ends), sentences in zip(batch, per_text, strict=True):
        for units in sentences:
            encoding = next(encodings)
            counts.add(units)
            if encoding.ids and units.words:
                writer.add_sentence(encoding.ids, codes=units.token_codes(encoding.offsets))
        if ends:
            writer.end_document()


class UnitEncoder:
    """The token store's shard encoder for unit ``units`` (``data/store/side_channels.py``): each sentence's ids with
    their join codes from ``finder``, and the shard's unit counts beside it. With an entity tagger (a model) it stays
    in the preparing process; without one it is pickled into the workers."""

    def __init__(self, finder: UnitFinder):
        self.finder, self.counts = finder, UnitCounts()

    @property
    def main_process_only(self) -> bool:
        return self.finder.tagger is not None

    def start(self, source: str) -> None:
        self.finder.source = source  # named by the message about broken marks
        self.counts = UnitCounts()

    def encode(self, batch: list[tuple[str, bool]], writer, tokenizer) -> None:
        encode_units(batch, writer, tokenizer, self.finder, self.counts)

    def finish(self, stem: Path) -> None:
        write_counts(stem, self.counts)


# --- collocation counts, in worker processes (data/units/store.py merges them) -------------------------------

_counting: dict = {}


def start_counting(segmenter: str, joined: list[set[Pair]], boundary: str, text_column: str) -> None:
    """Set up a counting process (a pool initializer): the word segmenter, the pairs earlier passes joined."""
    _counting.update(segmenter=segmenter, joined=joined, boundary=boundary, text_column=text_column)


def count_piece(job: dict) -> tuple[int, int]:
    """Count the units and pairs of ``job``'s piece into sorted runs in ``job["folder"]``; returns how many units
    it counted, and how many words with a letter."""
    source, piece = Source(**job["source"]), Piece(**job["piece"])
    counts = SpilledCounts(Path(job["folder"]), job["stem"], job.get("spill_entries", SPILL_ENTRIES))
    segmenter, joined = _counting["segmenter"], _counting["joined"]
    for text, _ in read_piece(source, piece, _counting["boundary"], _counting["text_column"], lambda _: None):
        for line in text.splitlines():
            if not line.strip():
                continue
            for sentence in split_sentences(line):
                counts.add(*sentence_units([sentence[s:e] for s, e in split_words(sentence, segmenter)], joined))
    counts.spill()
    return counts.total, counts.lettered
