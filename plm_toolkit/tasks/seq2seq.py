"""Sequence-to-sequence fine-tuning of encoder-decoder backbones (the Transformer, T5).

- ``task=translation``: sentence pairs as ``plm-train``'s ``data=parallel`` reads them (``data.train_file`` a prefix
  of two language files or a JSONL file with one key per language), BLEU and chrF by sacrebleu.
- ``task=seq2seq``: source and target columns of any TSV, CSV, JSONL or Parquet file; BLEU, chrF and exact match.
- The text-to-text form of classification (Raffel et al. 2020, section 2.4): ``task=sst2`` (any GLUE task or
  ``task=classification``) on an encoder-decoder checkpoint reads ``sst2 sentence: <text>``
  (``task.input_template``) and learns to generate the label's word (``task.label_words``: negative / positive),
  scored with the task's usual metric; an output that is no label word counts as wrong. STS-B's scores become
  text rounded to 0.2 as in T5.

Training is teacher-forced cross-entropy (``objectives/translation.py``); evaluation decodes with
``plm_toolkit/generation/decoding.py`` and writes the outputs to ``predictions.json`` (row -> text, or row -> label).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import torch
from tokenizers import Tokenizer
from torch import nn

from plm_toolkit.core.command_schema import FinetuneMode
from plm_toolkit.core.errors import ConfigError, DataError, PlmError
from plm_toolkit.core.registry import TASKS
from plm_toolkit.data.batching.collate import Seq2SeqCollator
from plm_toolkit.data.sources.parallel_text import ReadCounts, iter_pairs, report_counts, resolve
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.generation.decoding import SearchConfig
from plm_toolkit.generation.text_metrics import bleu_chrf, exact_match
from plm_toolkit.models.base import ENCODER_DECODER
from plm_toolkit.objectives.base import ObjectiveOutput
from plm_toolkit.objectives.translation import (
    check_decoding,
    decode,
    flatten_outputs,
    search_config,
    teacher_forced,
    unflatten_outputs,
)
from plm_toolkit.tasks.base import Task, TaskData, limit
from plm_toolkit.tasks.classification import ClassificationConfig, SequenceClassification, read_columns, read_rows
from plm_toolkit.tasks.metrics import METRICS

log = logging.getLogger("plm_toolkit")

TEXT_METRICS = ("bleu", "chrf", "exact_match")


@dataclass
class Seq2SeqConfig:
    # Registry name: seq2seq (columns of a TSV/CSV/JSONL file) or translation (parallel text).
    name: str = "seq2seq"
    # Column of the input text: a header name (alternatives joined by a pipe), a 0-based index with header=false,
    # or a JSONL key.
    source_column: str = "source"
    # Column of the output text.
    target_column: str = "target"
    # Whether the first line of a TSV/CSV file names the columns.
    header: bool = True
    # Text put before every source (T5's task prefixes, e.g. "summarize: ").
    source_prefix: str = ""
    # Label smoothing eps of the cross-entropy (nn/losses.py's convention; the Transformer: 0.1).
    label_smoothing: float = 0.0
    # Beam size of evaluation decoding; 1 decodes greedily.
    num_beams: int = 4
    # GNMT length penalty alpha of beam search.
    length_penalty: float = 0.6
    # Output length limit: max_length_a * source length + max_length_b tokens.
    max_length_a: float = 1.0
    # The b of the length limit: tokens allowed beyond max_length_a * source length.
    max_length_b: int = 50
    # Metrics of the decoded validation set: bleu, chrf (sacrebleu), exact_match.
    metrics: list[str] = field(default_factory=lambda: ["bleu", "chrf", "exact_match"])
    # sacrebleu's BLEU tokenizer.
    bleu_tokenize: str = "13a"


@dataclass
class TranslationTaskConfig(Seq2SeqConfig):
    name: str = "translation"
    # Language of the input side: the suffix of its file, or its key in a JSONL row.
    source_lang: str = "en"
    # Language of the output side.
    target_lang: str = "de"
    label_smoothing: float = 0.1
    metrics: list[str] = field(default_factory=lambda: ["bleu", "chrf"])


def refuse_features(finetune, task: str) -> None:
    """finetune.mode=features reads an encoder's layers; an encoder-decoder trains in full."""
    if finetune is not None and finetune.mode != FinetuneMode.full:
        raise ConfigError(f"finetune.mode={finetune.mode.name}: task={task} on an encoder-decoder trains in full mode")


def encode_pairs(pairs: list[tuple[str, str]], tokenizer: Tokenizer, max_seq_len: int, what: str) -> list[dict]:
    """Features {source_ids, target_ids, index}; a side longer than max_seq_len - 1 tokens is cut (counted)."""
    most = max_seq_len - 1  # the collator adds the end token
    sources = [e.ids for e in tokenizer.encode_batch([s for s, _ in pairs], add_special_tokens=False)]
    targets = [e.ids for e in tokenizer.encode_batch([t for _, t in pairs], add_special_tokens=False)]
    cut = sum(len(s) > most for s in sources), sum(len(t) > most for t in targets)
    if any(cut):
        log.warning(
            "%s: cut %d sources and %d targets of %d pairs to %d tokens (data.max_seq_len=%d)",
            what,
            *cut,
            len(pairs),
            most,
            max_seq_len,
        )
    return [
        {"source_ids": s[:most], "target_ids": t[:most], "index": i}
        for i, (s, t) in enumerate(zip(sources, targets, strict=True))
    ]


class Seq2SeqTask(Task):
    """Teacher-forced training and decoded evaluation; subclasses read their files into (source, target) pairs."""

    required_capabilities = frozenset({ENCODER_DECODER})
    metric_denominators = {"task_nll": "task", "task_correct": "task"}

    @classmethod
    def check_config(cls, config) -> None:
        unknown = [m for m in config.metrics if m not in TEXT_METRICS]
        if unknown:
            raise ConfigError(f"task.metrics: unknown {unknown}; valid: {', '.join(TEXT_METRICS)}")
        if not 0.0 <= config.label_smoothing < 1.0:
            raise ConfigError(f"task.label_smoothing={config.label_smoothing}: expected a value in [0, 1)")
        check_decoding(config, "task")

    @classmethod
    def read_pairs(cls, config, path: str, key: str) -> list[tuple[str, str]]:
        rows = read_columns(
            path, {"source_column": config.source_column, "target_column": config.target_column}, config.header
        )
        return [(config.source_prefix + r["source_column"], r["target_column"]) for _, r in rows]

    @classmethod
    def prepare_data(cls, config, data_cfg, tokenizer: Tokenizer, vocab: Vocab, characters: int = 0) -> TaskData:
        # No training file: an evaluation only (trainer.epochs=0).
        pairs = cls.read_pairs(config, data_cfg.train_file, "data.train_file") if data_cfg.train_file else []
        pairs = limit(pairs, data_cfg.max_train_samples, "training pairs")
        train = encode_pairs(pairs, tokenizer, data_cfg.max_seq_len, str(data_cfg.train_file))
        validation, references = None, []
        if data_cfg.validation_file:
            pairs = limit(
                cls.read_pairs(config, data_cfg.validation_file, "data.validation_file"),
                data_cfg.max_eval_samples,
                "evaluation pairs",
            )
            validation = encode_pairs(pairs, tokenizer, data_cfg.max_seq_len, str(data_cfg.validation_file))
            references = [t for _, t in pairs]
        return TaskData(train, validation, eval_info={"tokenizer": tokenizer, "references": references})

    def __init__(self, config, model: nn.Module, vocab: Vocab, data: TaskData, finetune=None):
        refuse_features(finetune, config.name)
        super().__init__(config, model, vocab, data)
        self.eos_id = vocab.require("eos_id", f"task={config.name}")
        self.search = search_config(config, self.eos_id)

    def collator(self) -> Seq2SeqCollator:
        return Seq2SeqCollator(self.vocab.padding_id, self.eos_id)

    def target_counts(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        return {"task": int((batch["labels"] >= 0).sum())}

    def forward(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        loss_sum, nll_sum, correct = teacher_forced(model, batch, self.vocab.padding_id, self.config.label_smoothing)
        outputs = {}
        if not self.training:
            outputs = flatten_outputs(decode(model, batch, self.search), batch["index"])
        return ObjectiveOutput({"task": loss_sum}, {"task_nll": nll_sum, "task_correct": correct}, outputs)

    def decoded_texts(self, outputs: dict[str, torch.Tensor]) -> tuple[list[int], list[str]]:
        """Row indices and their decoded, detokenized outputs, in row order."""
        decoded = unflatten_outputs(outputs)
        rows = sorted(decoded)
        tokenizer = self.eval_info["tokenizer"]
        return rows, [tokenizer.decode(decoded[i], skip_special_tokens=True).strip() for i in rows]

    def finish_evaluation(self, outputs: dict[str, torch.Tensor]) -> dict[str, float]:
        rows, hypotheses = self.decoded_texts(outputs)
        references = [self.eval_info["references"][i] for i in rows]
        metrics: dict = {}
        if {"bleu", "chrf"} & set(self.config.metrics):
            scores = bleu_chrf(hypotheses, references, self.config.bleu_tokenize)
            metrics.update({k: v for k, v in scores.items() if k.split("_")[0] in self.config.metrics})
        if "exact_match" in self.config.metrics:
            metrics["exact_match"] = exact_match(hypotheses, references)
        self.artifacts = {"predictions.json": dict(zip(map(str, rows), hypotheses, strict=True))}
        self.last_metrics = metrics
        return {k: v for k, v in metrics.items() if isinstance(v, float)}


class TranslationTask(Seq2SeqTask):
    @classmethod
    def read_pairs(cls, config, path: str, key: str) -> list[tuple[str, str]]:
        counts = ReadCounts()
        source = resolve(path, config.source_lang, config.target_lang, key)
        pairs = [
            (config.source_prefix + s, t) for s, t in iter_pairs(source, config.source_lang, config.target_lang, counts)
        ]
        report_counts(path, counts)
        return pairs

    @classmethod
    def file_problems(cls, config, data_cfg) -> list[str]:
        out = []
        for key in ("train_file", "validation_file"):
            if data_cfg[key]:
                try:
                    resolve(data_cfg[key], config.source_lang, config.target_lang, f"data.{key}")
                except PlmError as err:
                    out.append(str(err))
        return out


def label_text(value: str, regression: bool) -> str:
    """T5's STS-B target: the score rounded to the nearest 0.2, as text ("3.8")."""
    return f"{round(float(value) * 5) / 5:.1f}" if regression else value


class TextToTextClassification(Seq2SeqTask):
    """A classification task (GLUE preset or task=classification) in T5's text-to-text form."""

    @classmethod
    def check_config(cls, config) -> None:
        SequenceClassification.check_config(config)
        if config.label_words and len(config.label_words) != len(config.labels):
            raise ConfigError(
                f"task.label_words={list(config.label_words)} needs one word per label of "
                f"task.labels={list(config.labels)}"
            )

    @classmethod
    def prepare_data(
        cls, config: ClassificationConfig, data_cfg, tokenizer: Tokenizer, vocab: Vocab, characters: int = 0
    ) -> TaskData:
        # No training file: an evaluation only (trainer.epochs=0), whose labels the validation file shows.
        train_rows = read_rows(data_cfg.train_file, config) if data_cfg.train_file else []
        eval_rows = read_rows(data_cfg.validation_file, config) if data_cfg.validation_file else []
        labels = [] if config.regression else list(config.labels) or sorted({r.label for r in train_rows or eval_rows})
        words = dict(zip(labels, config.label_words or labels, strict=True))

        def pairs_of(rows, path):
            out = []
            for r in rows:
                if config.regression:
                    target = label_text(r.label, regression=True)
                elif r.label in words:
                    target = words[r.label]
                else:
                    raise DataError(f"{path}:{r.line}: label {r.label!r} is not among {labels}; set task.labels")
                template = config.input_template or ("{text} {pair}" if r.pair is not None else "{text}")
                out.append((template.format(text=r.text, pair=r.pair or ""), target))
            return out

        train_rows = limit(train_rows, data_cfg.max_train_samples, "training rows")
        train_pairs = pairs_of(train_rows, data_cfg.train_file)
        train = encode_pairs(train_pairs, tokenizer, data_cfg.max_seq_len, str(data_cfg.train_file))
        validation, gold, pairs = None, [], []
        if data_cfg.validation_file:
            rows = limit(eval_rows, data_cfg.max_eval_samples, "evaluation rows")
            pairs = pairs_of(rows, data_cfg.validation_file)
            validation = encode_pairs(pairs, tokenizer, data_cfg.max_seq_len, str(data_cfg.validation_file))
            gold = [float(r.label) if config.regression else labels.index(r.label) for r in rows]
        targets = {t for _, t in train_pairs + pairs} if config.regression else set(words.values())
        longest = max(len(tokenizer.encode(t, add_special_tokens=False).ids) for t in targets)
        info = {"tokenizer": tokenizer, "gold": gold, "words": [words[label] for label in labels], "longest": longest}
        return TaskData(train, validation, eval_info=info, labels=labels)

    def __init__(self, config: ClassificationConfig, model: nn.Module, vocab: Vocab, data: TaskData, finetune=None):
        refuse_features(finetune, config.name)
        Task.__init__(self, config, model, vocab, data)
        self.labels = data.labels
        self.eos_id = vocab.require("eos_id", f"task={config.name} on an encoder-decoder")
        # Label words are short: greedy decoding, at most the longest label word and the end token.
        self.search = SearchConfig(max_new_tokens=int(self.eval_info["longest"]) + 1, eos_id=self.eos_id)

    def forward(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        loss_sum, nll_sum, correct = teacher_forced(model, batch, self.vocab.padding_id, 0.0)
        outputs = {}
        if not self.training:
            outputs = flatten_outputs(decode(model, batch, self.search), batch["index"])
        return ObjectiveOutput({"task": loss_sum}, {"task_nll": nll_sum, "task_correct": correct}, outputs)

    def finish_evaluation(self, outputs: dict[str, torch.Tensor]) -> dict[str, float]:
        rows, texts = self.decoded_texts(outputs)
        words = self.eval_info["words"]
        if self.config.regression:
            predictions = [_number(t) for t in texts]
            named = predictions
        else:
            predictions = [words.index(t) if t in words else -1 for t in texts]
            named = [self.labels[p] if p >= 0 else t for p, t in zip(predictions, texts, strict=True)]
        gold = [self.eval_info["gold"][i] for i in rows]
        metrics = {name: METRICS[name](predictions, gold) for name in self.config.metrics}
        metrics["invalid_outputs"] = float(
            sum(p == -1 for p in predictions) if not self.config.regression else sum(not _is_number(t) for t in texts)
        )
        self.artifacts = {"predictions.json": dict(zip(map(str, rows), named, strict=True))}
        self.last_metrics = metrics
        return metrics


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _number(text: str) -> float:
    return float(text) if _is_number(text) else 0.0


TASKS.register("seq2seq", Seq2SeqConfig, cls=Seq2SeqTask)(Seq2SeqTask)
TASKS.register("translation", TranslationTaskConfig, cls=TranslationTask)(TranslationTask)
