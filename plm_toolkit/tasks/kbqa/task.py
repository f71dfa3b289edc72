"""Question answering over a knowledge base (``task=kbqa``): simple questions, answered by one (subject, relation)
fact, in the four-stage pipeline of the BERT-era SimpleQuestions and NLPCC-KBQA systems (BuboQA; Mohammed et al.
2018, "Strong baselines for simple question answering over knowledge graphs with and without neural networks").

1. Mention detection: a token tagger marks the subject's mention (1 inside, 0 outside). Its training labels come from
   the gold subject's names and aliases found in the question (``kbqa_kb.find_mention``: exact, else the closest run
   of words). The predicted mention is the run of tagged tokens around the most confident one, widened to whole
   words (the most probable word when none is tagged).
2. Candidate entities: the knowledge base's entities one of whose names equals the mention (case and accents aside)
   or is close to it (``kbqa_kb.NameIndex``), each with its name score.
3. Relation scoring: the question with its mention masked (each mention token replaced by the mask token, so the
   relation is read from the wording and not from the name) is classified over the knowledge base's relation set.
4. The answer: the (candidate, relation) pair of the candidate's own relations that maximises
   entity_score ** entity_weight * P(relation | question), ties broken by the entity's degree (popularity, as
   Mohammed et al. break them); its objects are the answers.

Design. One encoder and two heads trained jointly: the loss is the mention tagger's token cross-entropy plus the
relation classifier's, each divided by its own target count (the loop's contract), over two passes of the encoder
per question, the plain question for the tagger and the masked one for the relations. In training the gold mention
is masked; in evaluation the predicted one, inside the same forward, so one evaluation pass runs the whole pipeline
and the per-row outputs (mention span, top relations) go to ``finish_evaluation`` for stages 2 and 4.

Why classification over the relation set and not a cross-encoder over (question, relation) pairs: the SimpleQuestions
baselines classify over the relation set (it is closed: every test relation occurs in training), which costs one
pass per question where a pair classifier costs one per candidate relation; and the loop evaluates rows fixed before
evaluation starts, while a pair classifier's rows would depend on the candidates stage 2 finds from stage 1's
predictions. Pair classifiers pay off where relations are open-ended strings seen once (NLPCC-KBQA's Chinese
predicates); a relation that no training question asks for gets no training signal here.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch import nn

from plm_toolkit.core.errors import ConfigError
from plm_toolkit.core.registry import TASKS
from plm_toolkit.data.tokenization.characters import word_character_ids
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.objectives.base import ObjectiveOutput
from plm_toolkit.tasks.base import IGNORE, Task, TaskData, limit, summary_vector
from plm_toolkit.tasks.heads import LinearHead
from plm_toolkit.tasks.kbqa.data import FORMATS, build_features, check_training, count_unanswerable, read_questions
from plm_toolkit.tasks.kbqa.knowledge_base import KnowledgeBase, NameIndex, read_kb
from plm_toolkit.tasks.kbqa.metrics import kbqa_scores

log = logging.getLogger("plm_toolkit")

# The word a backbone that reads characters (ELMo) sees in place of a masked mention.
MASK_WORD = "[MASK]"


@dataclass
class KbqaConfig:
    # Registry name.
    name: str = "kbqa"
    # The knowledge base's triples: a TSV file of subject_id<TAB>relation<TAB>object_id rows.
    kb_triples: str = ""
    # The entities' names: a TSV file of id<TAB>name rows, several per id for aliases.
    kb_names: str = ""
    # Format of data.train_file / data.validation_file: jsonl ({"question", "subject", "relation", "answers"}),
    # simplequestions (subject<TAB>relation<TAB>object<TAB>question), or auto (jsonl for .jsonl/.json files).
    question_format: str = "auto"
    # The relation classifier's labels, relation names in id order; empty: every relation of the knowledge base,
    # sorted. The fine-tuned checkpoint records them.
    labels: list[str] = field(default_factory=list)
    # Dropout before both heads; null takes the backbone's hidden dropout.
    dropout: float | None = None
    # Least similarity ratio (0-1) at which a name matches a mention that it does not equal: for the candidates of
    # a predicted mention, and for finding a training question's mention from its subject's names.
    fuzzy_threshold: float = 0.7
    # Candidate entities kept per question (best name scores first).
    max_candidates: int = 20
    # Relations kept per question (most probable first) for the joint choice of entity and relation.
    relation_top_k: int = 20
    # Exponent w of the entity's name score in the joint score entity_score ** w * P(relation), the relation's
    # probability given the masked question.
    entity_weight: float = 1.0


@dataclass
class Choice:
    entity: str
    relation: str
    answers: list[str]
    entity_score: float
    relation_score: float
    score: float


def choose(
    candidates: list[tuple[str, float]], relation_scores: dict[str, float], kb: KnowledgeBase, entity_weight: float
) -> Choice | None:
    """Stage 4: the best (entity, relation) of the candidates' own relations by entity_score ** entity_weight *
    P(relation), ties broken by the entity's degree, then by ids; None when no candidate has a scored relation."""
    best, best_key = None, None
    for entity, entity_score in candidates:
        for relation in kb.relations_of.get(entity, ()):
            if relation not in relation_scores:
                continue
            score = entity_weight * math.log(entity_score) + math.log(max(relation_scores[relation], 1e-30))
            key = (score, kb.degree[entity])
            if best_key is None or key > best_key:
                best_key = key
                best = Choice(
                    entity,
                    relation,
                    kb.objects[entity, relation],
                    entity_score,
                    relation_scores[relation],
                    math.exp(score),
                )
    return best


def predicted_mention(probability: torch.Tensor, word_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Stage 1's decision from the tagger's P(inside) (B, T) and ``word_ids`` (B, T; 0 off the question): the run of
    tagged tokens that holds the most probable token (that token alone when none is tagged), widened to whole words.
    Returns the tokens to mask (B, T) and the first and last word (B, 2; 0-based; first > last for a row without
    question tokens)."""
    on_question = word_ids > 0
    best = probability.masked_fill(~on_question, -1.0).argmax(dim=1, keepdim=True)  # (B, 1)
    inside = (probability > 0.5) & on_question
    inside.scatter_(1, best, on_question.gather(1, best))
    # Runs of consecutive tagged tokens get one id each; keep the run of the most probable token.
    starts = inside & ~F.pad(inside[:, :-1], (1, 0), value=False)
    run = starts.long().cumsum(dim=1)  # (B, T)
    chosen = inside & (run == run.gather(1, best))
    first = word_ids.masked_fill(~chosen, torch.iinfo(word_ids.dtype).max).min(dim=1).values  # (B,)
    last = word_ids.masked_fill(~chosen, 0).max(dim=1).values  # (B,)
    mask = on_question & (word_ids >= first[:, None]) & (word_ids <= last[:, None])
    return mask, torch.stack([first, last], dim=1) - 1


class KnowledgeBaseQA(Task):
    """A mention tagger and a relation classifier on one encoder; stages 2 and 4 decode at evaluation."""

    main_metric = "answer_accuracy"

    metric_denominators = {"mention_correct": "mention", "relation_correct": "relation"}
    # The head whose outputs follow task.labels; a checkpoint's mention tagger loads beside it.
    head_name = "relation_head"

    @classmethod
    def check_config(cls, config) -> None:
        problems = []
        for key in ("kb_triples", "kb_names"):
            if not config[key]:
                problems.append(f"task.{key} is not set: give the knowledge base's {key[3:]} TSV file")
        if config.question_format not in FORMATS:
            problems.append(f"task.question_format={config.question_format}: expected one of {', '.join(FORMATS)}")
        if not 0.0 < config.fuzzy_threshold <= 1.0:
            problems.append(f"task.fuzzy_threshold={config.fuzzy_threshold}: expected a ratio in (0, 1]")
        for key in ("max_candidates", "relation_top_k"):
            if config[key] < 1:
                problems.append(f"task.{key}={config[key]}: must be at least 1")
        if not (math.isfinite(config.entity_weight) and config.entity_weight >= 0):
            problems.append(f"task.entity_weight={config.entity_weight}: expected a finite number >= 0")
        if problems:
            raise ConfigError("; ".join(problems))

    @classmethod
    def file_problems(cls, config, data_cfg) -> list[str]:
        out = super().file_problems(config, data_cfg)
        keys = ("kb_triples", "kb_names")
        missing = [k for k in keys if config[k] and not Path(config[k]).expanduser().is_file()]
        return out + [f"task.{k}: {config[k]} is not a file" for k in missing]

    @classmethod
    def prepare_data(cls, config: KbqaConfig, data_cfg, tokenizer: Tokenizer, vocab: Vocab, characters: int = 0):
        kb = read_kb(config.kb_triples, config.kb_names)
        relations = list(config.labels) or kb.relations
        relation_ids = {relation: i for i, relation in enumerate(relations)}
        options = (relation_ids, tokenizer, data_cfg.max_seq_len, config.fuzzy_threshold)
        train = []
        if data_cfg.train_file:
            questions = read_questions(data_cfg.train_file, config.question_format)
            check_training(questions, kb, relations, data_cfg.train_file)
            questions = limit(questions, data_cfg.max_train_samples, "training questions")
            train, _, unmatched = build_features(questions, kb, *options, with_index=False, characters=characters)
            if unmatched:
                log.warning(
                    "%s: %d of %d question(s) name their subject in no way its names match (task.fuzzy_threshold=%s): "
                    "the tagger learns nothing from them",
                    data_cfg.train_file,
                    unmatched,
                    len(questions),
                    config.fuzzy_threshold,
                )
        validation, info = None, None
        if data_cfg.validation_file:
            questions = limit(
                read_questions(data_cfg.validation_file, config.question_format),
                data_cfg.max_eval_samples,
                "evaluation questions",
            )
            validation, encoded, _ = build_features(questions, kb, *options, with_index=True, characters=characters)
            count_unanswerable(questions, kb, data_cfg.validation_file)
            info = {"kb": kb, "encoded": encoded}
        return TaskData(train, validation, eval_info=info, labels=relations)

    def __init__(self, config: KbqaConfig, model: nn.Module, vocab: Vocab, data: TaskData, **options):
        super().__init__(config, model, vocab, data, **options)
        self.labels = data.labels
        self.mention_head = LinearHead(model, 2, config.dropout, self.width)
        self.relation_head = LinearHead(model, len(self.labels), config.dropout, self.width)
        # The mention's stand-in: the mask token, else the unknown token (GPT-2's byte-level BPE has neither: its
        # end-of-text token).
        self.mask_id = next(i for i in (vocab.mask_id, vocab.unk_id, vocab.padding_id) if i is not None)
        self.names = NameIndex(data.eval_info["kb"]) if data.eval_info else None

    def target_counts(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        return {"mention": int((batch["labels"] != IGNORE).sum()), "relation": int((batch["relation"] != IGNORE).sum())}

    def masked(self, batch: dict[str, torch.Tensor], mask: torch.Tensor) -> dict[str, torch.Tensor]:
        """``batch`` with the tokens of ``mask`` (B, T) replaced by the mask token (and its characters)."""
        out = dict(batch)
        out["input_ids"] = batch["input_ids"].masked_fill(mask, self.mask_id)
        if "char_ids" in batch:
            chars = torch.tensor(word_character_ids(MASK_WORD, batch["char_ids"].shape[-1]), device=mask.device)
            out["char_ids"] = torch.where(mask[..., None], chars, batch["char_ids"])  # (B, T, C)
        return out

    def forward(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        mention_logits = self.mention_head(self.encode(model, batch).hidden).float()  # (B, T, 2)
        gold = batch["labels"]  # (B, T)
        mention_loss = F.cross_entropy(
            mention_logits.flatten(0, 1), gold.flatten(), ignore_index=IGNORE, reduction="sum"
        )
        if self.training:
            mask, span = gold == 1, None
        else:
            probability = mention_logits.detach().softmax(dim=-1)[..., 1]  # (B, T)
            mask, span = predicted_mention(probability, batch["word_ids"])
        reps = self.encode(model, self.masked(batch, mask))
        relation_logits = self.relation_head(summary_vector(model, reps, batch["attention_mask"])).float()  # (B, R)
        relation = batch["relation"]  # (B,)
        relation_loss = F.cross_entropy(relation_logits, relation, ignore_index=IGNORE, reduction="sum")
        tagged = mention_logits.detach().argmax(dim=-1)
        metrics = {
            "mention_correct": ((tagged == gold) & (gold != IGNORE)).sum(),
            "relation_correct": ((relation_logits.detach().argmax(dim=-1) == relation) & (relation != IGNORE)).sum(),
        }
        outputs = {}
        if not self.training and "index" in batch:
            k = min(self.config.relation_top_k, relation_logits.shape[-1])
            top = relation_logits.detach().log_softmax(dim=-1).topk(k, dim=-1)
            outputs = {
                "span": span,
                "relation_ids": top.indices,
                "relation_log_probs": top.values,
                "index": batch["index"],
            }
        loss_sums = {"mention": mention_loss, "relation": relation_loss}
        return ObjectiveOutput(loss_sums=loss_sums, metrics=metrics, outputs=outputs)

    def finish_evaluation(self, outputs: dict[str, torch.Tensor]) -> dict[str, float]:
        order = outputs["index"].argsort()
        kb, encoded = self.eval_info["kb"], self.eval_info["encoded"]
        rows = []
        for index, span, ids, log_probs in zip(
            outputs["index"][order].tolist(),
            outputs["span"][order].tolist(),
            outputs["relation_ids"][order].tolist(),
            outputs["relation_log_probs"][order].tolist(),
            strict=True,
        ):
            item = encoded[index]
            question = item.question
            mention = ""
            if 0 <= span[0] <= span[1] < len(item.word_spans):
                mention = question.text[item.word_spans[span[0]][0] : item.word_spans[span[1]][1]]
            candidates = self.names.candidates(mention, self.config.fuzzy_threshold, self.config.max_candidates)
            relation_scores = {self.labels[i]: math.exp(p) for i, p in zip(ids, log_probs, strict=True)}
            choice = choose(candidates, relation_scores, kb, self.config.entity_weight)
            rows.append((item, tuple(span), [entity for entity, _ in candidates], choice, mention))
        metrics, predictions = kbqa_scores(rows, kb)
        self.artifacts = {"predictions.jsonl": "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in predictions)}
        self.last_metrics = metrics
        return metrics


TASKS.register("kbqa", KbqaConfig, cls=KnowledgeBaseQA)(KnowledgeBaseQA)
