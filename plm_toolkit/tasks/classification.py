"""Sentence and sentence-pair classification and regression: ``task=classification`` for any TSV, CSV, JSONL or Parquet
file with named text and label columns, and the GLUE tasks from their official TSV files (Wang et al. 2019).

Each GLUE task is a preset in ``configs/task/<name>.yaml`` that names its columns, labels and metrics, registered
with this class by ``tasks/glue/suite.py``; the code below is the same for all. The head reads the backbone's sequence
summary (BERT: the pooled [CLS], Devlin et al. 2019 section 4.1; XLNet: its last token).
"""

from __future__ import annotations

import csv
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch import nn

from plm_toolkit.core.errors import ConfigError, DataError
from plm_toolkit.core.registry import TASKS
from plm_toolkit.data.sources.parquet import SUFFIXES as PARQUET_SUFFIXES
from plm_toolkit.data.sources.parquet import read_table_rows
from plm_toolkit.data.sources.user_files import iter_jsonl, iter_lines, scalar_text
from plm_toolkit.data.tokenization.characters import token_strings, word_character_ids
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.objectives.base import ObjectiveOutput
from plm_toolkit.tasks.base import Task, TaskData, init_linear, limit, summary_vector
from plm_toolkit.tasks.heads import ACTIVATIONS, LinearHead
from plm_toolkit.tasks.metrics import METRICS

log = logging.getLogger("plm_toolkit")


@dataclass
class ClassificationConfig:
    # Registry name: a GLUE task (sst2, mrpc, rte, cola, stsb, mnli, qnli, qqp, wnli) or classification.
    name: str = "classification"
    # Column of the first text: a header name (alternatives joined by a pipe, the first present is used), or a
    # 0-based field index when header=false. JSONL files name keys.
    text_column: str = "text"
    # Column of the second text of a pair; null for single sentences.
    text_pair_column: str | None = None
    # Column of the label (a class name, or a number for regression).
    label_column: str = "label"
    # Class names in id order; empty reads them from the training file (sorted) and saves them with the run.
    labels: list[str] = field(default_factory=list)
    # Predict one real number with a squared-error loss (STS-B) instead of a class.
    regression: bool = False
    # Metrics reported on the validation file: accuracy, f1 (of class id 1), matthews, pearson, spearman.
    metrics: list[str] = field(default_factory=lambda: ["accuracy"])
    # Whether the first line of a TSV/CSV file names the columns (GLUE's CoLA files have none).
    header: bool = True
    # Skip rows whose field count differs from the header's (counted in one warning) instead of refusing the file:
    # GLUE's first QQP download has questions broken over two lines.
    skip_malformed_rows: bool = False
    # Dropout before the head; null takes the backbone's hidden dropout.
    dropout: float | None = None
    # A dense layer of the head's own before the classifier, with this activation: null for none (BERT's classifier
    # over the pooled vector; ELECTRA's paper over [CLS]); gelu as transformers' ElectraForSequenceClassification
    # (which plm-export can then write); tanh as XLNet's summary projection. A checkpoint's head with a dense layer
    # brings its own when this is null.
    head_activation: str | None = None
    # Whether the classifier has a bias: null for one, unless the checkpoint's head has none (transformers' GPT-2 and
    # GPT sequence classifiers, whose ``score`` has no bias); false trains the bias-free head those classes hold
    # (which plm-export can then write); true keeps a bias (a checkpoint's head without one starts it at zero).
    head_bias: bool | None = None
    # Encoder-decoder backbones (T5's text-to-text form): how a row is written as the input text, {text} and {pair}
    # standing for the two columns; empty: the text, then the pair after a space.
    input_template: str = ""
    # Encoder-decoder backbones: the word generated for each label, in task.labels order; empty: the label names.
    label_words: list[str] = field(default_factory=list)


@dataclass
class Row:
    line: int
    text: str
    pair: str | None
    label: str


def _rows(path: Path):
    """(line number, fields) of a TSV (GLUE: no quoting), CSV or JSONL file (``data/sources/user_files.py``'s checked
    reader) or a Parquet table (row number); fields are a list, or a JSON object (a Parquet row: a dict too)."""
    if path.suffix == ".jsonl":
        yield from iter_jsonl(path)
        return
    if path.suffix in PARQUET_SUFFIXES:  # a table's rows as JSONL's objects, numbered from 1
        yield from enumerate(read_table_rows(path), 1)
        return
    lines = (line + "\n" for _, line in iter_lines(path))
    reader = (
        csv.reader(lines, delimiter=",")
        if path.suffix == ".csv"
        else csv.reader(lines, delimiter="\t", quoting=csv.QUOTE_NONE)
    )
    try:
        for fields in reader:
            if fields:
                yield reader.line_num, fields
    except csv.Error as err:
        raise DataError(f"{path}:{reader.line_num}: unreadable ({err})") from None


def _column(spec: str, names: list[str] | None, path: Path, key: str, keys: bool = False) -> Any:
    """The field index (or JSON key) a column spec names, or DataError naming the file and the columns."""
    if names is None:  # header=false: a 0-based index
        if not spec.isdigit():
            raise ConfigError(f"task.{key}={spec}: with task.header=false, give a 0-based column index")
        return int(spec)
    for alternative in spec.split("|"):
        if alternative in names:
            return alternative if keys else names.index(alternative)
    what = f"task.{key}" if key.endswith("_column") else key
    raise DataError(f"{path}:1: no column {spec!r} ({what}); the columns are {', '.join(map(str, names))}")


def read_columns(
    path: str | Path, specs: dict[str, str], header: bool = True, skip_malformed: bool = False
) -> list[tuple[int, dict[str, str]]]:
    """(line number, {key: value}) for every row of a TSV, CSV, JSONL or Parquet file, reading the columns that
    ``specs`` names (config key -> column spec, see ``ClassificationConfig.text_column``); a missing column or a
    short line is a DataError naming file:line and the config key, or with ``skip_malformed`` a row left out (and
    counted in one warning) when its field count differs from the header's."""
    path = Path(path)
    out: list[tuple[int, dict[str, str]]] = []
    where: dict[str, Any] | None = None
    width = 0
    skipped: list[int] = []
    for number, fields in _rows(path):
        if where is None:
            if isinstance(fields, dict):
                where = {k: _column(s, list(fields), path, k, keys=True) for k, s in specs.items()}
            elif header:
                where = {k: _column(s, fields, path, k) for k, s in specs.items()}
                width = len(fields)
                continue
            else:
                where = {k: _column(s, None, path, k) for k, s in specs.items()}
                width = len(fields)
        if isinstance(fields, dict):
            missing = [str(where[k]) for k in specs if where[k] not in fields]
            if missing:
                raise DataError(f"{path}:{number}: missing key(s) {', '.join(missing)}")
            values = {k: scalar_text(fields[where[k]], path, number, where[k]) for k in specs}
        else:
            needed = max(max(where.values()) + 1, width)
            if skip_malformed and len(fields) != needed:
                skipped.append(number)
                continue
            if len(fields) < needed:
                raise DataError(
                    f"{path}:{number}: {len(fields)} field(s), expected {needed} (a missing column or a stray tab)"
                )
            if len(fields) > width:
                # The extra fields would be dropped unseen; usually a tab inside a text.
                what = "the header's" if header else "the first line's"
                raise DataError(
                    f"{path}:{number}: {len(fields)} fields, more than {what} {width} (a tab inside a text?)"
                )
            values = {k: fields[where[k]] for k in specs}
        out.append((number, values))
    if skipped:
        lines = ", ".join(map(str, skipped[:5])) + (", ..." if len(skipped) > 5 else "")
        log.warning("%s: skipped %d row(s) whose field count is not the header's %d (lines %s)", path, len(skipped),
                    width, lines)  # fmt: skip
    if not out:
        raise DataError(f"{path}: no rows")
    return out


def read_rows(path: str | Path, config: ClassificationConfig) -> list[Row]:
    """The rows of a classification file; a missing column or a short line is a DataError naming file:line."""
    specs = {"text_column": config.text_column, "label_column": config.label_column}
    if config.text_pair_column:
        specs["text_pair_column"] = config.text_pair_column
    return [
        Row(number, values["text_column"], values.get("text_pair_column"), values["label_column"])
        for number, values in read_columns(path, specs, config.header, config.skip_malformed_rows)
    ]


def label_targets(rows: list[Row], labels: list[str], regression: bool, path) -> list:
    """Each row's target: its label's id in ``labels``, or its number for regression; DataError names file:line."""
    index = {name: i for i, name in enumerate(labels)}
    out = []
    for row in rows:
        if regression:
            try:
                value = float(row.label)
            except ValueError:
                value = math.nan
            if not math.isfinite(value):
                raise DataError(f"{path}:{row.line}: label {row.label!r} is not a finite number (task.regression)")
            out.append(value)
        elif row.label not in index:
            raise DataError(
                f"{path}:{row.line}: label {row.label!r} is not among the training labels {labels}; set task.labels"
            )
        else:
            out.append(index[row.label])
    return out


def encode_rows(
    rows: list[Row], targets: list, tokenizer: Tokenizer, max_seq_len: int, with_index: bool, characters: int = 0
) -> list[dict[str, Any]]:
    """The features of ``rows`` (a pair's two texts cut longest first to ``max_seq_len`` tokens) with their targets;
    ``with_index`` adds each row's position (evaluation), ``characters`` > 0 the words' character ids."""
    tokenizer.enable_truncation(max_length=max_seq_len, strategy="longest_first")
    try:
        inputs = [(r.text, r.pair) if r.pair is not None else r.text for r in rows]
        encodings = tokenizer.encode_batch(inputs)
    finally:
        tokenizer.no_truncation()
    features = []
    for i, (encoding, target) in enumerate(zip(encodings, targets, strict=True)):
        feature = {"input_ids": encoding.ids, "token_type_ids": encoding.type_ids, "labels": target}
        if characters:
            row = rows[i]
            texts = (row.text, row.pair) if row.pair is not None else (row.text,)
            feature["char_ids"] = [word_character_ids(t, characters) for t in token_strings(encoding, texts)]
        if with_index:
            feature["index"] = i
        features.append(feature)
    return features


class SequenceClassification(Task):
    """Cross-entropy (or squared error for regression) over a head on the sequence summary."""

    metric_denominators = {"task_correct": "task"}
    head_kind = "sequence"

    @classmethod
    def check_config(cls, config) -> None:
        unknown = [m for m in config.metrics if m not in METRICS]
        if unknown:
            raise ConfigError(f"task.metrics: unknown {unknown}; valid: {', '.join(METRICS)}")
        if config.regression and set(config.metrics) - {"pearson", "spearman"}:
            raise ConfigError("task.regression=true reports pearson and spearman only; fix task.metrics")
        if config.head_activation is not None and config.head_activation not in ACTIVATIONS:
            raise ConfigError(
                f"task.head_activation={config.head_activation}: expected null or one of {', '.join(ACTIVATIONS)}"
            )

    @classmethod
    def prepare_data(
        cls, config: ClassificationConfig, data_cfg, tokenizer: Tokenizer, vocab: Vocab, characters: int = 0
    ) -> TaskData:
        # Without a training file (an evaluation only, trainer.epochs=0) the labels come from the validation file.
        train_rows = read_rows(data_cfg.train_file, config) if data_cfg.train_file else []
        rows = read_rows(data_cfg.validation_file, config) if data_cfg.validation_file else []
        labels = list(config.labels)
        if not config.regression and not labels:  # from the whole file, also when max_train_samples cuts it
            labels = sorted({r.label for r in train_rows or rows})
        train_rows = limit(train_rows, data_cfg.max_train_samples, "training rows")
        train = encode_rows(
            train_rows,
            label_targets(train_rows, labels, config.regression, data_cfg.train_file),
            tokenizer,
            data_cfg.max_seq_len,
            with_index=False,
            characters=characters,
        )
        validation, gold = None, None
        if data_cfg.validation_file:
            rows = limit(rows, data_cfg.max_eval_samples, "evaluation rows")
            gold = label_targets(rows, labels, config.regression, data_cfg.validation_file)
            validation = encode_rows(rows, gold, tokenizer, data_cfg.max_seq_len, True, characters)
        return TaskData(train, validation, eval_info={"gold": gold}, labels=labels)

    def __init__(self, config: ClassificationConfig, model: nn.Module, vocab: Vocab, data: TaskData, **options):
        super().__init__(config, model, vocab, data, **options)
        self.labels = data.labels
        self.head = LinearHead(model, 1 if config.regression else len(self.labels), config.dropout, self.width)
        if config.head_activation is not None:
            self.head.add_dense(config.head_activation)
            init_linear(self.head.dense, model)
        if config.head_bias is False:
            self.head.drop_bias()

    def target_counts(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        return {"task": int(batch["labels"].shape[0])}

    def logits(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        reps = self.encode(model, batch)
        return self.head(summary_vector(model, reps, batch["attention_mask"])).float()  # (B, C)

    def forward(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        logits = self.logits(model, batch)  # (B, C)
        gold = batch["labels"]  # (B,)
        metrics, outputs = {}, {}
        if self.config.regression:
            scores = logits.squeeze(-1)  # (B,)
            loss_sum = F.mse_loss(scores, gold.float(), reduction="sum")
            predictions = scores.detach()
        else:
            loss_sum = F.cross_entropy(logits, gold, reduction="sum")
            predictions = logits.detach().argmax(dim=-1)  # (B,)
            metrics["task_correct"] = (predictions == gold).sum()
        if not self.training and "index" in batch:
            outputs = {"predictions": predictions, "index": batch["index"]}
        return ObjectiveOutput(loss_sums={"task": loss_sum}, metrics=metrics, outputs=outputs)

    def finish_evaluation(self, outputs: dict[str, torch.Tensor]) -> dict[str, float]:
        order = outputs["index"].argsort()
        index = outputs["index"][order].numpy()
        predictions = outputs["predictions"][order].numpy()
        gold = np.asarray(self.eval_info["gold"])[index]
        metrics = {name: METRICS[name](predictions, gold) for name in self.config.metrics}
        named = predictions.tolist() if self.config.regression else [self.labels[int(p)] for p in predictions]
        self.artifacts = {"predictions.json": dict(zip(map(str, index.tolist()), named, strict=True))}
        self.last_metrics = metrics
        return metrics


TASKS.register("classification", ClassificationConfig, cls=SequenceClassification)(SequenceClassification)
