"""ERNIE's knowledge masking on hand-built batches: every unit whole or not at all, the 15% and 80/10/10 rates over
units, the stages by step, and the same draws whatever batch or padding a row lands in."""

from __future__ import annotations

import pickle

import pytest
import torch

from plm_toolkit.core.errors import ConfigError
from plm_toolkit.data.units.knowledge import ENTITY, NONE, PHRASE, WORD
from plm_toolkit.objectives.knowledge_masking import KnowledgeMaskingConfig, StagedMasking, stage_starts
from plm_toolkit.objectives.masking import IGNORE_INDEX, NO_JOIN, MaskingTransform, word_spans
from plm_toolkit.objectives.mlm import MaskedLanguageModeling, MlmConfig

VOCAB_SIZE = 99
PAD, UNK, CLS, SEP, MASK = 0, 7, 40, 41, 98
SPECIALS = (PAD, UNK, CLS, SEP, MASK)


def unit_codes(length: int, generator: torch.Generator) -> list[int]:
    """Join codes of ``length`` tokens: words of 1-3 pieces, some runs of 2-3 words joined into phrases and some
    of 1-4 words into entities (entities never cut a phrase: the levels nest)."""
    codes: list[int] = []
    while len(codes) < length:
        kind = int(torch.randint(4, (1,), generator=generator))  # 0, 1: loose words, 2: a phrase, 3: an entity
        words = 1 if kind < 2 else int(torch.randint(2, 4, (1,), generator=generator)) if kind == 2 else 0
        words = words or int(torch.randint(1, 5, (1,), generator=generator))
        link = PHRASE if kind == 2 else ENTITY
        for w in range(words):
            pieces = int(torch.randint(1, 4, (1,), generator=generator))
            codes.append(NONE if w == 0 else link)
            codes.extend([WORD] * (pieces - 1))
    return codes[:length]


def make_batch(lengths: list[int], width: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Rows of [CLS] tokens... [SEP] and padding, with a units column (NONE on specials and padding)."""
    non_special = torch.tensor([i for i in range(VOCAB_SIZE) if i not in SPECIALS])
    rows = len(lengths)
    batch = {
        "input_ids": torch.full((rows, width), PAD),
        "attention_mask": torch.zeros(rows, width, dtype=torch.long),
        "special_tokens_mask": torch.ones(rows, width, dtype=torch.bool),
        "units": torch.full((rows, width), NONE, dtype=torch.int8),
    }
    for row, length in enumerate(lengths):
        body = length - 2
        batch["input_ids"][row, 1 : length - 1] = non_special[
            torch.randint(len(non_special), (body,), generator=generator)
        ]
        batch["input_ids"][row, 0], batch["input_ids"][row, length - 1] = CLS, SEP
        batch["attention_mask"][row, :length] = 1
        batch["special_tokens_mask"][row, 1 : length - 1] = False
        batch["units"][row, 1 : length - 1] = torch.tensor(unit_codes(body, generator), dtype=torch.int8)
    return batch


def knowledge(**rates) -> MaskingTransform:
    return MaskingTransform(VOCAB_SIZE, MASK, SPECIALS, masking="knowledge", **rates)


@pytest.fixture(scope="module")
def sample():
    generator = torch.Generator().manual_seed(3)
    lengths = torch.randint(24, 129, (1500,), generator=generator).tolist()
    return make_batch(lengths, 128, generator)


def units_of(batch, row: int, level: int) -> list[list[int]]:
    maskable = (batch["attention_mask"][row].bool() & ~batch["special_tokens_mask"][row]).nonzero().squeeze(1)
    codes = batch["units"][row]
    return word_spans(maskable.tolist(), [int(codes[p]) <= level for p in maskable.tolist()])


@pytest.mark.parametrize("level", [NO_JOIN, WORD, PHRASE, ENTITY])
def test_every_unit_is_masked_whole_or_not_at_all(sample, level):
    out = knowledge()(sample, range(1500), level=level)
    chosen = out["mlm_labels"] != IGNORE_INDEX
    sizes = []
    for row in range(200):
        for unit in units_of(sample, row, level):
            picked = chosen[row, unit]
            assert bool(picked.all()) or not bool(picked.any()), (row, unit)
            if picked.all():
                ids = out["input_ids"][row, unit]
                # One 80/10/10 draw per unit: all [MASK], or none of them.
                assert bool((ids == MASK).all()) or not bool((ids == MASK).any())
                sizes.append(len(unit))
    # The levels really differ: later stages pick longer units on average.
    assert sum(sizes) / len(sizes) >= {NO_JOIN: 1.0, WORD: 1.7, PHRASE: 2.1, ENTITY: 2.5}[level]


@pytest.mark.parametrize("level", [WORD, ENTITY])
def test_rates_over_units(sample, level):
    out = knowledge()(sample, range(1500), level=level)
    maskable = sample["attention_mask"].bool() & ~sample["special_tokens_mask"]
    chosen = out["mlm_labels"] != IGNORE_INDEX
    # Units that would overshoot a row's 15% are skipped, so the share sits at or just under 15%.
    share = chosen.sum().item() / maskable.sum().item()
    assert 0.14 <= share <= 0.1505, share
    counts = {"mask": 0, "random": 0, "kept": 0}
    for row in range(1500):
        for unit in units_of(sample, row, level):
            if not chosen[row, unit[0]]:
                continue
            new, old = out["input_ids"][row, unit], sample["input_ids"][row, unit]
            kind = "mask" if (new == MASK).all() else "kept" if (new == old).all() else "random"
            counts[kind] += 1
    n = sum(counts.values())
    assert n > 4000

    def within(share, p):  # four standard errors of a binomial share over n units
        return abs(share - p) <= 4 * (p * (1 - p) / n) ** 0.5

    # Random replacements that hit every original id by chance count as kept (at most 1 in 94 per token).
    assert within(counts["mask"] / n, 0.8), counts
    assert within(counts["random"] / n, 0.1), counts
    assert within(counts["kept"] / n, 0.1), counts


def test_stages_follow_the_step(sample):
    config = KnowledgeMaskingConfig(total_steps=100, stage_fractions=[0.3, 0.2, 0.5])
    assert stage_starts(config) == (30, 50)
    inner = knowledge()
    staged = StagedMasking(inner, stage_starts(config), "token", total_steps=100)
    rows = {k: v[:50] for k, v in sample.items()}
    for step, level in [(0, NO_JOIN), (29, NO_JOIN), (30, PHRASE), (49, PHRASE), (50, ENTITY), (99, ENTITY)]:
        got = staged(rows, range(50), step=step)
        expected = inner(rows, range(50), level=level)
        assert torch.equal(got["mlm_labels"], expected["mlm_labels"]), step
        assert torch.equal(got["input_ids"], expected["input_ids"]), step
    # Evaluation (no step) masks at the last stage training reaches; with basic_unit=word the basic stage is words.
    assert torch.equal(staged(rows, range(50))["mlm_labels"], inner(rows, range(50), level=ENTITY)["mlm_labels"])
    by_words = StagedMasking(inner, (30, 50), "word", total_steps=100)
    assert torch.equal(by_words(rows, range(50), step=3)["input_ids"], inner(rows, range(50), level=WORD)["input_ids"])
    no_entity = StagedMasking(inner, (30, 100), "word", total_steps=100)
    assert no_entity.final_stage == 1
    assert pickle.loads(pickle.dumps(staged)).starts == (30, 50)


def test_a_row_masks_the_same_in_any_batch_and_padding(sample):
    rows = {k: v[:8] for k, v in sample.items()}
    together = knowledge()(rows, range(100, 108), level=PHRASE)
    width = int(rows["attention_mask"][3].sum())
    alone = knowledge()({k: v[3:4, :width] for k, v in rows.items()}, [103], level=PHRASE)
    assert torch.equal(together["input_ids"][3, :width], alone["input_ids"][0])
    assert torch.equal(together["mlm_labels"][3, :width], alone["mlm_labels"][0])


def test_whole_word_reads_the_segmenters_words_when_the_batch_has_units(sample):
    """BERT-wwm over the units' words (e.g. jieba's for Chinese): every word whole, no phrase joined."""
    wwm = MaskingTransform(VOCAB_SIZE, MASK, SPECIALS, masking="whole_word")
    out = wwm(sample, range(1500))
    chosen = out["mlm_labels"] != IGNORE_INDEX
    for row in range(100):
        for unit in units_of(sample, row, WORD):
            assert bool(chosen[row, unit].all()) or not bool(chosen[row, unit].any())


def test_knowledge_masking_config_checks():
    with pytest.raises(ConfigError, match=r"objective.masking=knowledge needs objective=knowledge_masking"):
        MaskedLanguageModeling.check_config(MlmConfig(masking="knowledge"))
    from plm_toolkit.objectives.knowledge_masking import KnowledgeMasking

    with pytest.raises(ConfigError, match=r"objective.stage_fractions=\[0.5, 0.6, 0.0\]: expected three shares"):
        KnowledgeMasking.check_config(KnowledgeMaskingConfig(total_steps=10, stage_fractions=[0.5, 0.6, 0.0]))
    with pytest.raises(ConfigError, match=r"objective.total_steps=None"):
        KnowledgeMasking.check_config(KnowledgeMaskingConfig())
    KnowledgeMasking.check_config(KnowledgeMaskingConfig(masking="whole_word"))  # no stages, no steps needed
