"""ERNIE's knowledge units in the token store: what keys a store of units, the phrases learned from the training
split before any token gets its join code, and the counts of units kept in the manifest.

The token store knows them as the side channel of its unit ``units`` (``KNOWLEDGE_UNITS``, which
``data/units/__init__.py`` registers with ``data/store/side_channels.py``). A store of units is prepared in two
steps when phrases are learned by collocation scores: first every word2phrase pass counts each piece of the training
split in a worker process (a piece's counts spill to disk in sorted runs) and merges the runs as streams
(``data/units/collocations.py``); the phrases found go to ``phrases.txt`` in the store's folder (a resumed
preparation reads them there). Then the workers find the units of every piece and write its ids with their join
codes (``UnitEncoder``, ``data/units/corpus.py``), as for any store.

The entity tagger is a model: with one, the pieces are tokenized and coded in the main process, one at a time.
Spawned workers would each load the checkpoint (its memory once per worker) with torch's threads competing for the
same cores, and its forward pass, not the tokenizing, is what takes the time. Collocations are still counted in
worker processes (they need no tagger).
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from plm_toolkit.core.atomic import write_text
from plm_toolkit.core.choices import choice
from plm_toolkit.core.errors import DataError
from plm_toolkit.data.store.processes import worker_pool
from plm_toolkit.data.units import collocations
from plm_toolkit.data.units.collocations import Pair, merge_counts, phrases_of
from plm_toolkit.data.units.corpus import (
    UnitCounts,
    UnitEncoder,
    UnitFinder,
    count_piece,
    counts_file,
    start_counting,
)
from plm_toolkit.data.units.knowledge import Lexicon, lexicon_path, read_lexicon

if TYPE_CHECKING:
    from plm_toolkit.core.data_schema import DataConfig

log = logging.getLogger("plm_toolkit")

# Bump when a change here, in data/units/corpus.py or in data/units/knowledge.py changes the codes a store holds.
FORMAT_VERSION = 3
PHRASES = "phrases.txt"


def _digest(*paths: Path) -> str:
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
    return digest.hexdigest()


def units_settings(sources: Any) -> dict:
    """Every setting that changes the units of a corpus (``sources``: the objective config, or ``TaggedSources``):
    part of the settings of a store of units."""
    presegmented = bool(sources.presegmented)
    if sources.phrase_lexicon:
        path = lexicon_path(sources.phrase_lexicon, "objective.phrase_lexicon")
        phrases: Any = {"lexicon": _digest(path), "case": choice(sources.phrase_lexicon_case)}
    elif presegmented:
        phrases = "marks"
    elif sources.collocation_passes > 0:
        settings = (sources.collocation_min_count, sources.collocation_threshold, sources.collocation_passes)
        phrases = {"collocations": [int(settings[0]), float(settings[1]), int(settings[2])]}
    else:
        phrases = None
    gazetteer = None
    if sources.entity_gazetteer:
        path = lexicon_path(sources.entity_gazetteer, "objective.entity_gazetteer")
        gazetteer = {"file": _digest(path), "case": choice(sources.entity_gazetteer_case)}
    tagger = getattr(sources, "tagger", None)
    if sources.entity_tagger and tagger is None:
        raise ValueError(
            f"entity_tagger={sources.entity_tagger} names a tagger that was not built; pass the sources as "
            "TaggedSources(sources, tagger) (data/units/corpus.py: tagged_sources)"
        )
    weights = _digest(tagger.folder / "model.safetensors", tagger.folder / "objective.safetensors") if tagger else None
    return {"version": FORMAT_VERSION, "segmenter": choice(sources.word_segmenter), "presegmented": presegmented,
            "phrases": phrases, "gazetteer": gazetteer, "tagger": weights}  # fmt: skip


# What each setting of a store's units comes from, in words.
_SETTING_KEYS = {
    "version": "format of the units (a store written by another version of plm_toolkit)",
    "segmenter": "objective.word_segmenter",
    "presegmented": "objective.presegmented",
    "phrases": "objective.phrase_lexicon (or its contents) or objective.collocation_* settings",
    "gazetteer": "objective.entity_gazetteer (its contents) or objective.entity_gazetteer_case",
    "tagger": "objective.entity_tagger (its weights)",
}


def units_difference(have: dict | None, wanted: dict) -> str:
    """The first setting in which a store's units (``have``) differ from a run's, named by its objective keys."""
    changed = next(name for name in wanted if (have or {}).get(name) != wanted[name])
    return _SETTING_KEYS.get(changed, changed)


def unit_finder(folder: Path, data_cfg: DataConfig, plan: dict, sources: Any, processes: int) -> UnitFinder:
    """The finder of a store's units: the lexicon and gazetteer read, the phrases learned from the training split
    (``plan``: the preparation's plan; counted in ``processes`` worker processes) or read from the store's folder."""
    segmenter = choice(sources.word_segmenter)
    phrases = None
    if sources.phrase_lexicon:
        ignore = choice(sources.phrase_lexicon_case) == "ignore"
        phrases = read_lexicon(sources.phrase_lexicon, "objective.phrase_lexicon", segmenter, ignore, 2)
    elif not sources.presegmented and sources.collocation_passes > 0:
        path = folder / PHRASES
        if not path.is_file():
            found = learn_phrases(folder, data_cfg, plan, sources, processes)
            write_text(path, "".join(" ".join(p) + "\n" for p in sorted(found)))
        phrases = Lexicon([line.split(" ") for line in path.read_text(encoding="utf-8").splitlines()])
    gazetteer = None
    if sources.entity_gazetteer:
        ignore = choice(sources.entity_gazetteer_case) == "ignore"
        gazetteer = read_lexicon(sources.entity_gazetteer, "objective.entity_gazetteer", segmenter, ignore, 1)
    return UnitFinder(segmenter, bool(sources.presegmented), phrases, gazetteer, getattr(sources, "tagger", None))


def learn_phrases(folder: Path, data_cfg: DataConfig, plan: dict, sources: Any, processes: int) -> set[tuple[str, ...]]:
    """word2phrase's passes over the training pieces of ``plan``, each piece counted in a worker process and the
    counts merged from disk (``data/units/collocations.py``): the same phrases as ``collocations.learn_phrases``."""
    min_count, threshold = int(sources.collocation_min_count), float(sources.collocation_threshold)
    scratch = folder / ".collocations"
    records, pieces = plan["sources"]["train"], plan["pieces"]["train"]
    joined: list[set[Pair]] = []
    for number in range(int(sources.collocation_passes)):
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        jobs = [{"source": records[p["source"]], "piece": p, "folder": str(scratch), "stem": f"{k:05d}",
                 "spill_entries": collocations.SPILL_ENTRIES} for k, p in enumerate(pieces)]  # fmt: skip
        setup = (choice(sources.word_segmenter), joined, choice(data_cfg.document_boundary), str(data_cfg.text_column))
        workers = max(1, min(processes, len(jobs)))
        if workers == 1:
            start_counting(*setup)
            counted = list(map(count_piece, jobs))
        else:
            with worker_pool(workers, start_counting, setup) as pool:
                counted = list(pool.imap(count_piece, jobs))
        total = sum(units for units, _ in counted)
        if not any(lettered for _, lettered in counted):  # refused before a pass is logged
            raise no_letters([record["path"] for record in records])
        found = merge_counts(scratch, total, min_count, threshold)
        log.info("collocation pass %d over %d units in %d pieces: %d pairs join", number + 1, total, len(jobs),
                 len(found))  # fmt: skip
        if not found:
            break
        joined.append(found)
    shutil.rmtree(scratch, ignore_errors=True)
    return phrases_of(joined)


def split_summary(folder: Path, split: str, shards: int, sources: list[str]) -> dict:
    """The unit counts of a split's shards, summed (``UnitCounts.summary``); DataError when its text has no
    letters."""
    counts = UnitCounts()
    for number in range(shards):
        counts.merge(json.loads(counts_file(folder / split / f"{number:05d}").read_text(encoding="utf-8")))
    summary = counts.summary()
    if summary["words_with_letters"] == 0:
        raise no_letters(sources)
    return summary


def no_letters(sources: list[str]) -> DataError:
    return DataError(
        f"{', '.join(sources)} has no letters (only digits, punctuation or symbols); knowledge masking needs text "
        "to find words, phrases and entities in"
    )


def log_units(split: str, info: dict, sources: Any) -> None:
    """The log line of a split's units (from the store's manifest); for the training split, a warning when the
    entity stage has no entity to mask."""
    summary = info["units"]
    scalars = {k: v for k, v in summary.items() if not k.startswith("top_")}
    if choice(getattr(sources, "masking", "knowledge")) != "knowledge" and phrase_origin(sources) == "none":
        words = ", ".join(s["path"] for s in info["sources"])  # whole-word masking (data/units/words.py)
        log.info("words of %s (%s): %d sentences, %d words", words, choice(sources.word_segmenter),
                 summary["sentences"], summary["words"])  # fmt: skip
        return
    log.info(
        "knowledge units of %s: %s (phrases from %s)",
        ", ".join(s["path"] for s in info["sources"]),
        ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in scalars.items()),
        phrase_origin(sources),
    )
    if split == "train" and not (sources.entity_gazetteer or sources.entity_tagger or sources.presegmented):
        log.warning(
            "no entity source (objective.entity_gazetteer, objective.entity_tagger or pre-segmented {{...}} "
            "marks): the entity stage masks phrases and words only"
        )


def phrase_origin(sources: Any) -> str:
    """Where the phrases come from, in words."""
    if sources.phrase_lexicon:
        return f"lexicon {sources.phrase_lexicon}"
    if sources.presegmented:
        return "[[...]] marks"
    return "collocations" if sources.collocation_passes > 0 else "none"


class KnowledgeUnits:
    """ERNIE's knowledge units as the token store's side channel of unit ``units`` (``data/store/side_channels.py``):
    the join code of every token beside its id, keyed by ``units_settings``."""

    description = "sentences tokenized one by one with their knowledge units' join codes (ERNIE)"
    one_node = "ERNIE's knowledge units are found over the whole corpus"

    def settings(self, sources: Any) -> dict:
        return units_settings(sources)

    def difference(self, have: dict | None, wanted: dict) -> str:
        return f"holds knowledge units found with another {units_difference(have, wanted)} than this run's"

    def encoder(self, folder: Path, data_cfg: DataConfig, plan: dict, sources: Any, processes: int) -> UnitEncoder:
        encoder = UnitEncoder(unit_finder(folder, data_cfg, plan, sources, processes))
        if encoder.main_process_only:
            log.info("the entity tagger tags the corpus in this process (one piece at a time; docs/data-store.md)")
        return encoder

    def summary(self, folder: Path, split: str, shards: int, sources: list[str]) -> dict:
        return split_summary(folder, split, shards, sources)


KNOWLEDGE_UNITS = KnowledgeUnits()
