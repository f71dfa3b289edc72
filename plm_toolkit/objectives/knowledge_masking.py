"""ERNIE 1.0's knowledge masking (Sun et al. 2019, https://arxiv.org/abs/1904.09223, section 3.2): masked LM whose
targets are whole knowledge units, learned in three stages:

1. basic-level masking: single tokens or whole words (``basic_unit``; ERNIE masks Chinese characters here);
2. phrase-level masking: whole phrases, and whole words outside them;
3. entity-level masking: whole entities, and whole phrases and words outside them.

Each stage lasts a fraction of training (``stage_fractions`` of ``total_steps``, which the preset takes from
``trainer.max_steps``; the paper gives no lengths, so the default splits training in thirds). Within a stage the
row's units are drawn in random order until 15% of its tokens are targets, and each unit is masked as a whole:
[MASK] for 80% of the units, random tokens for 10%, unchanged for 10% (one draw per unit). Evaluation always masks
at the last stage training reaches, so evaluation losses are comparable along a run.

The units come from the corpus (``data/units/corpus.py``: pre-segmented text, a phrase lexicon and an entity
gazetteer, collocation phrases learned from the corpus, entities tagged by a task=ner checkpoint, jieba words for
Chinese) and travel with the examples as one join code per token. The same objective with
``objective.masking=whole_word`` masks the same words without stages (BERT-wwm; with ``word_segmenter=jieba``
Chinese BERT-wwm), the baseline that knowledge masking is measured against.

The stage follows the optimizer step, which the loader hands to the batch transform with every micro-batch, so a
resumed run masks exactly as an uninterrupted one, also across a stage boundary.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from omegaconf import OmegaConf

from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core.choices import choice, choices
from plm_toolkit.core.errors import CheckpointError, ConfigError
from plm_toolkit.core.registry import OBJECTIVES
from plm_toolkit.data.layouts.plan import DataPlan, Layout
from plm_toolkit.objectives.masking import NO_JOIN, WORD_LEVEL, MaskingTransform, MaskingUnit, WordSegmenter
from plm_toolkit.objectives.mlm import MaskedLanguageModeling, MlmConfig

BasicUnit = choices("BasicUnit", "word", "token")
LexiconCase = choices("LexiconCase", "exact", "ignore")
STAGES = ("basic", "phrase", "entity")
TAGGER_KEY = "objective.entity_tagger"


@dataclass
class KnowledgeMaskingConfig(MlmConfig):
    # Registry name of the objective.
    name: str = "knowledge_masking"
    # knowledge: ERNIE's staged masking of whole words, phrases and entities; whole_word, ngram or token mask the
    # same corpus without stages (whole_word over the segmenter's words is BERT-wwm, the usual baseline).
    masking: MaskingUnit = MaskingUnit.knowledge
    # Units of the basic stage: word (whole words) or token (single tokens; ERNIE's Chinese characters).
    basic_unit: BasicUnit = BasicUnit.word
    # Shares of training spent in the basic, phrase and entity stages (three values summing to 1).
    stage_fractions: list[float] = field(default_factory=lambda: [0.34, 0.33, 0.33])
    # Optimizer steps the stage fractions divide; the preset sets ${trainer.max_steps}.
    total_steps: int | None = None
    # How text splits into words: regex (letter/digit runs, each punctuation mark and CJK character alone, as
    # BERT's pre-tokenizer) or jieba (Chinese words; needs the jieba extra).
    word_segmenter: WordSegmenter = WordSegmenter.regex
    # The corpus is ERNIE-style pre-segmented text: words separated by spaces, [[a phrase]] and {{an entity}}
    # marked (markers may nest, not cross); the markers are removed before tokenizing.
    presegmented: bool = False
    # A phrase lexicon: UTF-8, one phrase per line (text before a tab), matched longest first. Null (and not
    # presegmented): phrases are learned from the training corpus by collocation scores.
    phrase_lexicon: str | None = None
    # Matching of the phrase lexicon: ignore (case-insensitive) or exact.
    phrase_lexicon_case: LexiconCase = LexiconCase.ignore
    # An entity gazetteer: UTF-8, one name per line (text before a tab), matched longest first.
    entity_gazetteer: str | None = None
    # Matching of the gazetteer: exact (names are case-sensitive: "Apple" is not "apple") or ignore.
    entity_gazetteer_case: LexiconCase = LexiconCase.exact
    # A plm-finetune task=ner checkpoint (run or checkpoint folder) that tags the corpus's entities.
    entity_tagger: str | None = None
    # Collocation phrases: a pair joins when each word and the pair occur at least this often (word2phrase).
    collocation_min_count: int = 5
    # Collocation phrases: the score (count(ab) - min_count) / (count(a) count(b)) * words must exceed this.
    collocation_threshold: float = 100.0
    # Collocation phrases: passes over the corpus (pass k joins pairs of earlier joins: up to 2^k words); 0: none.
    collocation_passes: int = 2


def ner_checkpoint(path: str | Path) -> tuple[Path, list[str]]:
    """(checkpoint folder, label names) of the task=ner checkpoint that ``objective.entity_tagger`` names
    (``tasks/entity_tagger.py`` tags with it); CheckpointError naming the key otherwise."""
    given = Path(path).expanduser()
    if not given.exists():
        raise CheckpointError(f"{TAGGER_KEY}={given}: no such file or directory")
    folder = ckpt.plm_checkpoint_dir(given)
    if folder is None:
        raise CheckpointError(
            f"{TAGGER_KEY}={given}: not a plm-finetune checkpoint ({ckpt.MODEL_FILE} + {ckpt.CONFIG_FILE}); "
            "expected the run or checkpoint folder of plm-finetune task=ner"
        )
    task = OmegaConf.load(folder / ckpt.CONFIG_FILE).get("task")
    if task is None or task.get("name") != "ner":
        what = "a pretraining checkpoint (no task)" if task is None else f"a task={task.get('name')} checkpoint"
        raise CheckpointError(
            f"{TAGGER_KEY}={given} is {what}; expected a named-entity tagger from plm-finetune task=ner"
        )
    labels = [str(label) for label in task.get("labels") or []]
    if not any(label[:2] in ("B-", "I-") for label in labels):
        raise CheckpointError(f"{TAGGER_KEY}={given}: its task.labels {labels} hold no B-/I- tags; expected BIO labels")
    return folder, labels


def stage_starts(config) -> tuple[int, int]:
    """The optimizer steps at which the phrase and the entity stage begin."""
    basic, phrase, _ = config.stage_fractions
    return round(basic * config.total_steps), round((basic + phrase) * config.total_steps)


class StagedMasking:
    """The batch transform: ``MaskingTransform`` at the join level of the stage that step ``step`` is in.
    Picklable (plain ints and the inner transform) for data-loader workers."""

    # The loader passes the optimizer step of every training micro-batch (data/batching/loader.py).
    takes_step = True

    def __init__(self, masking: MaskingTransform, starts: tuple[int, int], basic_unit: str, total_steps: int):
        self.masking = masking
        self.starts = starts
        self.basic_level = WORD_LEVEL if basic_unit == "word" else NO_JOIN
        # Evaluation masks at the stage of the last training step.
        self.final_stage = self.stage(max(total_steps - 1, 0))

    def stage(self, step: int) -> int:
        return sum(step >= start for start in self.starts)

    def level(self, stage: int) -> int:
        """Join level of a stage: the basic stage groups by words (or not at all), later stages by their level."""
        return self.basic_level if stage == 0 else stage

    def __call__(
        self, batch: dict[str, torch.Tensor], seeds: Sequence[int], step: int | None = None
    ) -> dict[str, torch.Tensor]:
        stage = self.final_stage if step is None else self.stage(step)
        return self.masking(batch, seeds, level=self.level(stage))


@OBJECTIVES.register("knowledge_masking", KnowledgeMaskingConfig)
class KnowledgeMasking(MaskedLanguageModeling):
    """MLM over knowledge units; the loss, head and metrics are MLM's."""

    finds_units = True
    # hardware.unpad stays with objective=mlm, where packed runs are measured against padded ones.
    reads_packed_rows = False

    def __init__(self, config: KnowledgeMaskingConfig, model, vocab):
        super().__init__(config, model, vocab)
        self.check_config(config)
        if choice(config.masking) == "knowledge":
            self.transform = StagedMasking(
                self.masking, stage_starts(config), choice(config.basic_unit), config.total_steps
            )
        else:
            self.transform = self.masking

    @classmethod
    def check_config(cls, config) -> None:
        super().check_config(config)
        fractions = list(config.stage_fractions)
        if len(fractions) != 3 or min(fractions) < 0 or abs(sum(fractions) - 1.0) > 1e-6:
            raise ConfigError(
                f"objective.stage_fractions={fractions}: expected three shares (basic, phrase, entity) >= 0 that "
                "sum to 1"
            )
        if choice(config.masking) == "knowledge" and (config.total_steps is None or config.total_steps < 1):
            raise ConfigError(
                f"objective.total_steps={config.total_steps}: the stages need the run's length in steps "
                "(the preset sets ${trainer.max_steps})"
            )
        if config.collocation_min_count < 1 or config.collocation_threshold < 0 or config.collocation_passes < 0:
            raise ConfigError(
                "objective.collocation_min_count must be >= 1, objective.collocation_threshold >= 0 and "
                f"objective.collocation_passes >= 0; got {config.collocation_min_count}, "
                f"{config.collocation_threshold}, {config.collocation_passes}"
            )
        if choice(config.word_segmenter) == "jieba":
            from plm_toolkit.data.units.knowledge import jieba_module

            jieba_module()
        for key in ("phrase_lexicon", "entity_gazetteer"):
            path = getattr(config, key)
            if path and not Path(path).expanduser().is_file():
                raise ConfigError(f"objective.{key}={path}: no such file; expected UTF-8 text, one entry per line")
        if config.entity_tagger:
            try:
                ner_checkpoint(config.entity_tagger)
            except CheckpointError as err:
                raise ConfigError(str(err)) from None

    @classmethod
    def data_plan(cls, config, data_cfg, model_config) -> DataPlan:
        """MLM's plan, full sentences only (the units travel with them), with the units' sources."""
        plan = super().data_plan(config, data_cfg, model_config)
        if plan.layout != Layout.full_sentences:
            raise ConfigError(
                f"data.packing={plan.layout}: objective=knowledge_masking reads full sentences (its units travel "
                "with them); set data.packing=auto"
            )
        return dataclasses.replace(plan, units=OmegaConf.to_object(config) if OmegaConf.is_config(config) else config)

    def batch_transform(self):
        return self.transform
