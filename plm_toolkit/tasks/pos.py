"""Part-of-speech tagging from Universal Dependencies CoNLL-U files (BERT's token classification, section 5.3).

CoNLL-U (universaldependencies.org/format.html): one word per line in 10 tab-separated columns (ID, FORM, LEMMA, UPOS,
XPOS, FEATS, HEAD, DEPREL, DEPS, MISC), ``#`` comment lines, a blank line after each sentence. Multiword-token lines
(ID ``19-20``: the surface token "don't" over the words "do" and "n't") and empty nodes (ID ``8.1``) are skipped: the
syntactic words are tagged, as UD's evaluation (conll18_ud_eval.py) scores them. ``task.column`` picks UPOS (the 17
universal tags) or XPOS (the treebank's own, e.g. Penn tags in English-EWT). The score is word-level accuracy, UD's
UPOS/XPOS figure, and the accuracy on the evaluation words that the training sentences lack (``oov_accuracy``), where
a pretrained backbone helps most. Words are cut into sub-tokens as for NER (tasks/ner.py): the word's tag sits on
its first sub-token; a word past data.max_seq_len gets no prediction and counts as wrong.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

from plm_toolkit.core.errors import ConfigError, DataError
from plm_toolkit.core.registry import TASKS
from plm_toolkit.core.resources import resource_path
from plm_toolkit.data.sources.user_files import iter_lines
from plm_toolkit.tasks.base import TaskData
from plm_toolkit.tasks.ner import Sentence, TokenClassification

log = logging.getLogger("plm_toolkit")

# The bundled slice of UD English-EWT (plm_toolkit/corpora/ud_ewt/SOURCE.md), task=pos's default data.
BUNDLED_TRAIN = "corpora/ud_ewt/train.conllu"
BUNDLED_DEV = "corpora/ud_ewt/dev.conllu"
COLUMNS = 10


# task.column's choices and their columns (0-based): ID FORM LEMMA UPOS XPOS FEATS HEAD DEPREL DEPS MISC.
COLUMN_INDEX = {"upos": 3, "xpos": 4}


@dataclass
class PosConfig:
    # Registry name.
    name: str = "pos"
    # The CoNLL-U column whose tags are learnt: upos (universal POS, 17 tags) or xpos (the treebank's own tag set).
    column: str = "upos"
    # Dropout before the per-token head; null takes the backbone's hidden dropout.
    dropout: float | None = None
    # Tag names in id order; empty reads them from the training file (sorted). The fine-tuned checkpoint records
    # them, so that it tags text without its training file.
    labels: list[str] = field(default_factory=list)


def read_conllu(path: str | Path, column: str = "upos") -> list[Sentence]:
    """The sentences of a CoNLL-U file: each syntactic word's FORM and its tag in ``column`` (upos or xpos)."""
    path = Path(path).expanduser()
    index, name = COLUMN_INDEX[column], column.upper()
    sentences, words, tags, lines = [], [], [], []
    for number, line in iter_lines(path):
        if not line.strip():
            if words:
                sentences.append(Sentence(words, tags, lines))
            words, tags, lines = [], [], []
            continue
        if line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != COLUMNS:
            raise DataError(
                f"{path}:{number}: {len(fields)} tab-separated column(s), expected CoNLL-U's 10 (ID FORM LEMMA UPOS "
                "XPOS FEATS HEAD DEPREL DEPS MISC)"
            )
        kind = _id_kind(fields[0])
        if kind is None:
            raise DataError(
                f"{path}:{number}: ID {fields[0]!r} is not a word number (1, 2, ...), a multiword token's range "
                "(3-4) or an empty node (5.1); expected CoNLL-U's first column"
            )
        if kind != "word":  # a multiword token's line or an empty node: not a syntactic word
            continue
        if int(fields[0]) != len(words) + 1:
            raise DataError(
                f"{path}:{number}: word ID {fields[0]} where the sentence's word {len(words) + 1} comes; IDs count a "
                "sentence's words from 1, and a blank line ends each sentence"
            )
        tag = fields[index]
        if tag in ("", "_"):
            raise DataError(
                f"{path}:{number}: no {name} tag ({tag!r}) on the word {fields[1]!r}; task.column={column} "
                "needs one on every word"
            )
        words.append(fields[1])
        tags.append(tag)
        lines.append(number)
    if words:
        sentences.append(Sentence(words, tags, lines))
    if not sentences:
        raise DataError(
            f"{path}: no sentences; expected CoNLL-U (10 tab-separated columns a word, blank line after each sentence)"
        )
    return sentences


_WORD_ID = re.compile(r"[1-9][0-9]*")
_RANGE_ID = re.compile(r"([1-9][0-9]*)-([1-9][0-9]*)")
_EMPTY_NODE_ID = re.compile(r"(0|[1-9][0-9]*)\.[1-9][0-9]*")


def _id_kind(value: str) -> str | None:
    """ "word", "range" (a multiword token, its first word not after its last) or "empty" (an empty node) for a
    CoNLL-U ID as universaldependencies.org/format.html defines them, else None."""
    if _WORD_ID.fullmatch(value):
        return "word"
    matched = _RANGE_ID.fullmatch(value)
    if matched:
        return "range" if int(matched[1]) < int(matched[2]) else None
    return "empty" if _EMPTY_NODE_ID.fullmatch(value) else None


def tag_accuracy(gold: list[Sentence], predicted: list[list[str | None]]) -> dict[str, float]:
    """Word-level accuracy, and (where the gold sentences mark unseen words) the accuracy on unseen words."""
    right = words = unseen_right = unseen = 0
    for sentence, tags in zip(gold, predicted, strict=True):
        hits = [a == b for a, b in zip(sentence.tags, tags, strict=True)]
        right += sum(hits)
        words += len(hits)
        if sentence.unseen is not None:
            unseen_right += sum(hit for hit, new in zip(hits, sentence.unseen, strict=True) if new)
            unseen += sum(sentence.unseen)
    scores = {"accuracy": right / words if words else 0.0}
    if any(s.unseen is not None for s in gold):
        scores["oov_accuracy"] = unseen_right / unseen if unseen else 0.0
        scores["oov_words"] = float(unseen)
    return scores


class PosTagging(TokenClassification):
    """Cross-entropy over the first sub-token of each word; scored by word-level tag accuracy."""

    main_metric = "accuracy"
    unpredicted = None

    @classmethod
    def check_config(cls, config) -> None:
        if config.column not in COLUMN_INDEX:
            raise ConfigError(f"task.column={config.column}: expected upos or xpos (the CoNLL-U column of the tags)")

    @classmethod
    def read_sentences(cls, config: PosConfig, path: str | Path) -> list[Sentence]:
        return read_conllu(path, config.column)

    @staticmethod
    def label_order(found: set[str]) -> list[str]:
        return sorted(found)

    @classmethod
    def prepare_evaluation(cls, train: list[Sentence], gold: list[Sentence], labels: list[str], path: str) -> None:
        known = set(labels)
        for sentence in gold:
            for tag, line in zip(sentence.tags, sentence.lines, strict=True):
                if tag not in known:
                    source = "the training file" if train else "the checkpoint's labels"
                    raise DataError(f"{path}:{line}: tag {tag!r} does not occur in {source} ({', '.join(labels)})")
        if train:  # without training sentences (an evaluation only) every word would be unseen: not scored
            seen = {word for sentence in train for word in sentence.words}
            for sentence in gold:
                sentence.unseen = [word not in seen for word in sentence.words]

    def scores(self, gold: list[Sentence], predicted: list[list[str | None]]) -> dict[str, float]:
        return tag_accuracy(gold, predicted)

    @classmethod
    def prepare_data(cls, config: PosConfig, data_cfg, *args, **options) -> TaskData:
        train, validation = data_cfg.train_file, data_cfg.validation_file
        if train and validation and _same_file(validation, BUNDLED_DEV) and not _same_file(train, BUNDLED_TRAIN):
            log.warning(
                "data.validation_file is task=pos's default, the bundled UD English-EWT dev slice, while "
                "data.train_file=%s is another treebank: set data.validation_file to its own dev file",
                train,
            )
        return super().prepare_data(config, data_cfg, *args, **options)


def _same_file(path: str, bundled: str) -> bool:
    return Path(path).expanduser().resolve() == Path(resource_path(bundled))


TASKS.register("pos", PosConfig, cls=PosTagging)(PosTagging)
