"""Extractive question answering on SQuAD v1.1 and v2.0 (Rajpurkar et al. 2016, 2018), as in BERT (Devlin et al.
2019, sections 4.2 and 4.3); reading the files and cutting contexts into windows is ``squad_data.py``.

A span head scores every token as start (S.T_i) and end (E.T_j); decoding takes the best valid span (end after
start, at most ``max_answer_length`` tokens, start in the window where it has the most context) over all windows
and maps it back to the original context text through the offsets. SQuAD 2.0 predicts
no answer when s_null = S.C + E.C (smallest over the windows) exceeds the best span score by more than tau
(``null_score_diff_threshold``); ``null_odds.json`` holds s_null - best span score - tau, so that the official
script rescoring ``predictions.json`` with it gives the numbers of ``eval_results.json``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch import nn

from plm_toolkit.core.errors import ConfigError
from plm_toolkit.core.registry import TASKS
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.objectives.base import ObjectiveOutput
from plm_toolkit.tasks.base import Task, TaskData, limit
from plm_toolkit.tasks.heads import SpanHead
from plm_toolkit.tasks.squad.data import SquadConfig, SquadExample, Window, build_features, read_squad
from plm_toolkit.tasks.squad.metric import span_threshold_search, squad_evaluate

# Score given to padding positions, so they never win a softmax or a decoding argmax.
_NEVER = -1e4


def decode(
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    windows: list[Window],
    feature_rows: list[int],
    context: str,
    offsets: list[tuple[int, int]],
    config: SquadConfig,
) -> tuple[str, float]:
    """(answer text, s_null - best span score) of one question from the logits of its windows."""
    best_score, best_span, null = -np.inf, None, np.inf
    for row in feature_rows:
        window, s, e = windows[row], start_logits[row], end_logits[row]
        null = min(null, float(s[window.cls_index] + e[window.cls_index]))
        lo, hi = window.context_start, window.context_start + window.length
        starts_ok = np.where(np.asarray(window.max_context), s[lo:hi], -np.inf)
        n = min(config.n_best_size, window.length)
        top_start = np.argsort(-starts_ok, kind="stable")[:n]
        top_end = np.argsort(-e[lo:hi], kind="stable")[:n]
        for i in top_start:
            if not np.isfinite(starts_ok[i]):
                continue
            for j in top_end:
                if j < i or j - i + 1 > config.max_answer_length:
                    continue
                score = float(s[lo + i] + e[lo + j])
                if score > best_score:
                    best_score, best_span = score, (window.first_token + i, window.first_token + j)
    if best_span is None:
        return "", float("inf")
    text = context[offsets[best_span[0]][0] : offsets[best_span[1]][1]]
    return text, null - best_score


@dataclass
class SquadEvalInfo:
    examples: list[SquadExample]
    contexts: list[str]
    windows: list[Window]
    offsets: list[list[tuple[int, int]]]
    # The longest evaluation sequence: logits are padded to it so that batches concatenate.
    width: int


class QuestionAnswering(Task):
    """Start and end cross-entropy over the sequence, averaged over the two (BERT's run_squad loss)."""

    main_metric = "f1"

    head_kind = "span"

    @classmethod
    def check_config(cls, config) -> None:
        for key in ("doc_stride", "max_query_length", "max_answer_length", "n_best_size"):
            if config[key] < 1:
                raise ConfigError(f"task.{key}={config[key]}: must be at least 1")

    @classmethod
    def prepare_data(
        cls, config: SquadConfig, data_cfg, tokenizer: Tokenizer, vocab: Vocab, characters: int = 0
    ) -> TaskData:
        train = []  # none without a training file: an evaluation only (trainer.epochs=0)
        if data_cfg.train_file:
            path = data_cfg.train_file
            examples, contexts = read_squad(path, training=True)
            examples = limit(examples, data_cfg.max_train_samples, "training questions")
            train, _, _ = build_features(
                examples, contexts, tokenizer, vocab, config, data_cfg.max_seq_len, True, path, characters
            )
        validation, info = None, None
        if data_cfg.validation_file:
            examples, contexts = read_squad(data_cfg.validation_file)
            examples = limit(examples, data_cfg.max_eval_samples, "evaluation questions")
            validation, windows, offsets = build_features(
                examples,
                contexts,
                tokenizer,
                vocab,
                config,
                data_cfg.max_seq_len,
                False,
                data_cfg.validation_file,
                characters,
            )
            width = max(len(f["input_ids"]) for f in validation)
            info = SquadEvalInfo(examples, contexts, windows, offsets, width)
        return TaskData(train, validation, eval_info=info)

    def __init__(self, config: SquadConfig, model: nn.Module, vocab: Vocab, data: TaskData, **options):
        super().__init__(config, model, vocab, data, **options)
        self.head = SpanHead(model, self.width)

    def target_counts(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        return {"task": int(batch["input_ids"].shape[0])}

    def scores(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Start and end scores of every token, 2 x (B, T)."""
        return self.head(self.encode(model, batch).hidden)

    def forward(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        start, end = self.scores(model, batch)  # 2 x (B, T)
        padding = batch["attention_mask"] == 0
        start = start.float().masked_fill(padding, _NEVER)
        end = end.float().masked_fill(padding, _NEVER)
        loss_sum = (
            F.cross_entropy(start, batch["start_positions"], reduction="sum")
            + F.cross_entropy(end, batch["end_positions"], reduction="sum")
        ) / 2
        outputs = {}
        if not self.training and "feature_index" in batch:
            # Batches differ in width; pad to a fixed one so evaluation can concatenate them.
            width = max(self.eval_info.width, start.shape[1])
            outputs = {
                "start_logits": F.pad(start.detach(), (0, width - start.shape[1]), value=_NEVER),  # (B, width)
                "end_logits": F.pad(end.detach(), (0, width - end.shape[1]), value=_NEVER),  # (B, width)
                "feature_index": batch["feature_index"],
            }
        return ObjectiveOutput(loss_sums={"task": loss_sum}, outputs=outputs)

    def finish_evaluation(self, outputs: dict[str, torch.Tensor]) -> dict[str, float]:
        info: SquadEvalInfo = self.eval_info
        order = outputs["feature_index"].argsort()
        rows = outputs["feature_index"][order].tolist()
        start, end = outputs["start_logits"][order].numpy(), outputs["end_logits"][order].numpy()
        by_example: dict[int, list[int]] = {}
        for position, feature in enumerate(rows):
            by_example.setdefault(info.windows[feature].example, []).append(position)
        windows = [info.windows[f] for f in rows]
        predictions, spans, odds_of, null_odds = {}, {}, {}, {}
        tau = self.config.null_score_diff_threshold
        for example_index, feature_rows in by_example.items():
            example = info.examples[example_index]
            context, offsets = info.contexts[example.context], info.offsets[example.context]
            text, odds = decode(start, end, windows, feature_rows, context, offsets, self.config)
            spans[example.qid] = predictions[example.qid] = text
            if self.config.version_2_with_negative:
                predictions[example.qid] = "" if odds > tau else text
                # JSON has no infinity: a question without any valid span gets a large finite score.
                odds_of[example.qid] = min(odds, 1e6)
                # Released as s_null - best span score - tau: positive exactly where "no answer" was predicted, so
                # the official script (threshold 1.0) rescoring predictions.json with it agrees with this run.
                null_odds[example.qid] = min(odds - tau, 1e6)
        golds = {e.qid: [a for a, _ in e.answers] for e in info.examples}
        self.artifacts = {"predictions.json": predictions}
        if self.config.version_2_with_negative:
            # The official keys are the official script's on the files written beside them; the search over every
            # question's best span (which may answer more than tau did) is reported under span_best_*.
            metrics = squad_evaluate(golds, predictions, null_odds) | span_threshold_search(golds, spans, odds_of)
            self.artifacts.update({"null_odds.json": null_odds, "span_predictions.json": spans})
        else:
            metrics = squad_evaluate(golds, predictions)
        self.last_metrics = metrics
        return metrics


TASKS.register("squad2", SquadConfig, cls=QuestionAnswering)(QuestionAnswering)
TASKS.register("squad1", SquadConfig, cls=QuestionAnswering)(QuestionAnswering)
