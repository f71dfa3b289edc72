"""Named-entity recognition from CoNLL column files (BERT, Devlin et al. 2019, section 5.3).

One token per line with its tag in the last column, a blank line between sentences, ``-DOCSTART-`` lines ignored.
Tags follow BIO (IOB2): ``O``, ``B-TYPE``, ``I-TYPE``; the label set is read from the training file. Words are cut
into sub-tokens and the word's label sits on its first sub-token (the others carry no target), as in the paper.
Scores are entity-level precision, recall and F1 as conlleval computes them: a predicted entity counts only when
its type, first and last word all match a gold one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch import nn

from plm_toolkit.core.errors import DataError
from plm_toolkit.core.registry import TASKS
from plm_toolkit.data.sources.user_files import iter_lines
from plm_toolkit.data.tokenization.characters import template_character_ids, token_strings
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.objectives.base import ObjectiveOutput
from plm_toolkit.tasks.base import IGNORE, Task, TaskData, limit, template_of
from plm_toolkit.tasks.heads import LinearHead

log = logging.getLogger("plm_toolkit")


@dataclass
class NerConfig:
    # Registry name.
    name: str = "ner"
    # Dropout before the per-token head; null takes the backbone's hidden dropout.
    dropout: float | None = None
    # Tag names in id order; empty reads them from the training file (O, then each type's B- and I-). The
    # fine-tuned checkpoint records them, so that it tags text without its training file.
    labels: list[str] = field(default_factory=list)


@dataclass
class Sentence:
    words: list[str]
    tags: list[str]
    # Line number of each word, for messages.
    lines: list[int]
    # Per word, whether the training data lacks it (set on evaluation sentences by tasks that score unseen words).
    unseen: list[bool] | None = None


def _check_tag(tag: str, path: Path, line: int) -> None:
    if tag != "O" and not (len(tag) > 2 and tag[:2] in ("B-", "I-")):
        raise DataError(f"{path}:{line}: tag {tag!r} is not BIO (O, B-TYPE or I-TYPE)")


def read_conll(path: str | Path) -> list[Sentence]:
    """Sentences of a CoNLL column file; every line must have as many columns as the file's first one."""
    path = Path(path).expanduser()
    sentences, words, tags, lines = [], [], [], []
    width = None
    for number, line in iter_lines(path):
        fields = line.split()
        if not fields or fields[0] == "-DOCSTART-":
            if words:
                sentences.append(Sentence(words, tags, lines))
            words, tags, lines = [], [], []
            continue
        width = width or len(fields)
        if len(fields) != width or width < 2:
            raise DataError(
                f"{path}:{number}: {len(fields)} column(s), expected {max(width, 2)} (token ... tag) like the "
                "first line"
            )
        _check_tag(fields[-1], path, number)
        words.append(fields[0])
        tags.append(fields[-1])
        lines.append(number)
    if words:
        sentences.append(Sentence(words, tags, lines))
    if not sentences:
        raise DataError(f"{path}: no sentences")
    return sentences


def entities(tags: list[str]) -> set[tuple[str, int, int]]:
    """(type, first, last) of each entity, with conlleval's chunk boundaries: an entity starts at B-X, or at I-X
    after O or after a different type, and ends before the next tag that does not continue it."""
    found, start, kind = set(), None, None
    for i, tag in enumerate([*tags, "O"]):
        prefix, label = (tag[0], tag[2:]) if tag != "O" else ("O", None)
        continues = prefix == "I" and label == kind
        if start is not None and not continues:
            found.add((kind, start, i - 1))
            start, kind = None, None
        if prefix in ("B", "I") and not continues:
            start, kind = i, label
    return found


def entity_scores(gold: list[list[str]], predicted: list[list[str]]) -> dict[str, float]:
    """conlleval's precision, recall and F1 over entities, and per-word accuracy (fractions in [0, 1])."""
    correct = found_gold = found_predicted = 0
    words = right = 0
    for g, p in zip(gold, predicted, strict=True):
        gold_entities, predicted_entities = entities(g), entities(p)
        correct += len(gold_entities & predicted_entities)
        found_gold += len(gold_entities)
        found_predicted += len(predicted_entities)
        words += len(g)
        right += sum(a == b for a, b in zip(g, p, strict=True))
    precision = correct / found_predicted if found_predicted else 0.0
    recall = correct / found_gold if found_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "accuracy": right / words if words else 0.0}


def _features(sentences, label_ids, tokenizer, max_seq_len, path, with_index, characters=0, cut_note="O"):
    template = template_of(tokenizer, pair=False)
    budget = max_seq_len - template.num_special
    encodings = tokenizer.encode_batch([s.words for s in sentences], is_pretokenized=True, add_special_tokens=False)
    features, labelled_words, cut = [], [], 0
    for index, (sentence, encoding) in enumerate(zip(sentences, encodings, strict=True)):
        labels, words, previous = [], [], None
        for word in encoding.word_ids[:budget]:
            first = word is not None and word != previous
            if first:
                tag = sentence.tags[word]
                if tag not in label_ids:
                    raise DataError(f"{path}:{sentence.lines[word]}: tag {tag!r} does not occur in the training file")
                words.append(word)
            labels.append(label_ids[sentence.tags[word]] if first else IGNORE)
            previous = word
        ids = encoding.ids
        if len(ids) > budget:
            cut += 1
            ids = ids[:budget]
        ids, types, starts = template.assemble(ids)
        padded = [IGNORE] * len(ids)
        padded[starts["A"] : starts["A"] + len(labels)] = labels
        feature = {"input_ids": ids, "token_type_ids": types, "labels": padded}
        if characters:
            strings = token_strings(encoding, words=sentence.words)[:budget]
            feature["char_ids"] = template_character_ids(
                template.pieces, tokenizer.id_to_token, strings, (), characters
            )
        if with_index:
            feature["index"] = index
        features.append(feature)
        labelled_words.append(words)
    if cut:
        log.warning(
            "%s: %d sentence(s) longer than data.max_seq_len were cut; their tail counts as %s", path, cut, cut_note
        )
    # Words without a sub-token (e.g. only control characters) or past the cut get no prediction
    # (TokenClassification.unpredicted: O for NER).
    return features, labelled_words


class TokenClassification(Task):
    """Cross-entropy over the first sub-token of each word. A subclass for another tagging scheme supplies its own
    reader (``read_sentences``), label order (``label_order``), scores (``scores``) and the tag of words left
    unpredicted."""

    main_metric = "f1"
    # The tag of a word that gets no prediction (past data.max_seq_len, or without a sub-token); None: always wrong.
    unpredicted: str | None = "O"

    metric_denominators = {"task_correct": "task"}
    head_kind = "token"

    @classmethod
    def read_sentences(cls, config, path: str | Path) -> list[Sentence]:
        return read_conll(path)

    @staticmethod
    def label_order(found: set[str]) -> list[str]:
        # O first, then the types in order with B before I: a stable, readable id order.
        return sorted(found, key=lambda t: (t != "O", t[2:], t[:1]))

    @classmethod
    def prepare_evaluation(cls, train: list[Sentence], gold: list[Sentence], labels: list[str], path: str) -> None:
        """A hook on the evaluation sentences before their features are made (checks, unseen words)."""

    def scores(self, gold: list[Sentence], predicted: list[list[str | None]]) -> dict[str, float]:
        return entity_scores([s.tags for s in gold], predicted)

    @classmethod
    def prepare_data(
        cls, config: NerConfig, data_cfg, tokenizer: Tokenizer, vocab: Vocab, characters: int = 0
    ) -> TaskData:
        # Without a training file (an evaluation only, trainer.epochs=0) the labels come from the validation file.
        train = cls.read_sentences(config, data_cfg.train_file) if data_cfg.train_file else []
        gold = cls.read_sentences(config, data_cfg.validation_file) if data_cfg.validation_file else []
        # The label set comes from the whole training file, also when max_train_samples uses part of it.
        found = {t for s in train or gold for t in s.tags}
        train = limit(train, data_cfg.max_train_samples, "training sentences")
        labels = list(config.labels) or cls.label_order(found)
        label_ids = {t: i for i, t in enumerate(labels)}
        cut_note = cls.unpredicted or "wrong"
        features, _ = _features(
            train, label_ids, tokenizer, data_cfg.max_seq_len, data_cfg.train_file, False, characters, cut_note
        )
        validation, info = None, None
        if data_cfg.validation_file:
            gold = limit(gold, data_cfg.max_eval_samples, "evaluation sentences")
            cls.prepare_evaluation(train, gold, labels, data_cfg.validation_file)
            validation, words = _features(
                gold, label_ids, tokenizer, data_cfg.max_seq_len, data_cfg.validation_file, True, characters, cut_note
            )
            info = list(zip(gold, words, strict=True))
        return TaskData(features, validation, eval_info=info, labels=labels)

    def __init__(self, config: NerConfig, model: nn.Module, vocab: Vocab, data: TaskData, **options):
        super().__init__(config, model, vocab, data, **options)
        self.labels = data.labels
        self.head = LinearHead(model, len(self.labels), config.dropout, self.width)

    def target_counts(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        return {"task": int((batch["labels"] != IGNORE).sum())}

    def logits(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.head(self.encode(model, batch).hidden).float()  # (B, T, C)

    def forward(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        logits = self.logits(model, batch)  # (B, T, C)
        gold = batch["labels"]  # (B, T)
        loss_sum = F.cross_entropy(logits.flatten(0, 1), gold.flatten(), ignore_index=IGNORE, reduction="sum")
        predicted = logits.detach().argmax(dim=-1).masked_fill(gold == IGNORE, IGNORE)  # (B, T)
        correct = ((predicted == gold) & (gold != IGNORE)).sum()
        outputs = {}
        if not self.training and "index" in batch:
            # Word-level predictions in order (first sub-tokens only), padded to a fixed width.
            words = [row[row != IGNORE] for row in predicted.cpu()]
            width = max(len(s.words) for s, _ in self.eval_info)
            outputs = {
                "word_labels": torch.stack([F.pad(w, (0, width - len(w)), value=IGNORE) for w in words]),
                "index": batch["index"],
            }
        return ObjectiveOutput(loss_sums={"task": loss_sum}, metrics={"task_correct": correct}, outputs=outputs)

    def finish_evaluation(self, outputs: dict[str, torch.Tensor]) -> dict[str, float]:
        order = outputs["index"].argsort()
        gold, predicted = [], []
        for index, row in zip(outputs["index"][order].tolist(), outputs["word_labels"][order], strict=True):
            sentence, words = self.eval_info[index]
            tags = [self.unpredicted] * len(sentence.words)
            for word, label in zip(words, row[row != IGNORE].tolist(), strict=True):
                tags[word] = self.labels[label]
            gold.append(sentence)
            predicted.append(tags)
        metrics = self.scores(gold, predicted)
        self.artifacts = {"predictions.json": [" ".join(tag or "_" for tag in tags) for tags in predicted]}
        self.last_metrics = metrics
        return metrics


TASKS.register("ner", NerConfig, cls=TokenClassification)(TokenClassification)
