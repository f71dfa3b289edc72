"""BERT's dynamic masking, drawn afresh for every batch in the data-loader workers.

Sampling scheme (BERT's ``create_pretraining_data.py``, not Hugging Face's per-token Bernoulli): each row gets
exactly ``max(1, round(n_maskable * mask_prob))`` targets, capped by ``max_predictions_per_seq``, chosen uniformly
without replacement among its maskable positions (real tokens that are not special). A fixed count per row keeps
the number of targets, and so the loss scale and the gathered head's work, steady from batch to batch. Each
chosen position then becomes [MASK] with probability ``mask_token_prob``, a uniformly random non-special token
with probability ``random_token_prob``, and stays as it is otherwise (Devlin et al. 2019, section 3.1, "Task #1").

Row i draws only from ``torch.Generator().manual_seed(seeds[i])`` and only over its own maskable positions, so a
row is masked the same way whatever batch it lands in and however much padding that batch has.

The unit of selection is a masking option of every MLM-style objective (``objective.masking``):
- ``token``: single tokens, as above (BERT's original release).
- ``whole_word``: whole words, every piece of a chosen word together (BERT's later whole-word-masking release):
  words are drawn in random order and a word that would overshoot the target count is skipped.
- ``ngram``: spans of up to ``max_ngram`` whole words with p(n) proportional to 1/n (ALBERT section 4.1, after
  SpanBERT), chosen as ALBERT's ``create_pretraining_data.py`` does: candidate starts in random order, a drawn n
  shortened until the span fits the remaining budget, spans that overlap a chosen one skipped.
- ``knowledge``: ERNIE's knowledge units (Sun et al. 2019, section 3.2): words, phrases or entities, as the
  batch's ``units`` join codes (``data/units/knowledge.py``) group them at the level the caller names; units are drawn
  in random order and one that would overshoot the target count is skipped, and the 80/10/10 choice is made once per
  unit, so a unit is masked, replaced or kept as a whole (``objectives/knowledge_masking.py`` picks the level by
  training stage).
A piece continues a word when the tokenizer marks it so (WordPiece ``##``, byte-level BPE without a leading
space, see ``data/tokenization/vocab.py``) and it directly follows a maskable piece; when the batch carries ``units`` (a
word segmenter such as jieba found the words), its word-level join codes decide instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from plm_toolkit.core.choices import choices
from plm_toolkit.core.errors import ConfigError
from plm_toolkit.data.batching.collate import target_positions

# Label of a position that is not a target; cross-entropy's default ignore_index.
IGNORE_INDEX = -100
MaskingUnit = choices("MaskingUnit", "token", "whole_word", "ngram", "knowledge")
WordSegmenter = choices("WordSegmenter", "regex", "jieba")
# Join codes of the batch's ``units`` column (data/units/knowledge.py): a position continues the unit of the position
# before it when its code is at most the grouping level. ``NO_JOIN`` as the level: every token is a unit of its own.
WORD_LEVEL, NO_JOIN = 0, -1


def check_masking_config(cfg: Any, prefix: str = "objective", finds_units: bool = False) -> None:
    """Reject impossible masking rates with a ConfigError naming the key; ``cfg`` is an MLM-style config.
    ``finds_units``: the objective tokenizes its corpus with knowledge units, which masking=knowledge needs."""
    masking = getattr(cfg, "masking", "token")
    if getattr(masking, "value", masking) == "knowledge" and not finds_units:
        raise ConfigError(
            f"{prefix}.masking=knowledge needs objective=knowledge_masking, which finds the words, phrases and "
            "entities it masks"
        )
    for key in ("mask_prob", "mask_token_prob", "random_token_prob"):
        value = getattr(cfg, key)
        if not 0.0 <= value <= 1.0:
            raise ConfigError(f"{prefix}.{key} must lie in [0, 1], got {value}")
    if cfg.mask_token_prob + cfg.random_token_prob > 1.0:
        raise ConfigError(
            f"{prefix}.mask_token_prob + {prefix}.random_token_prob must be at most 1 "
            f"(the rest of the chosen tokens stay unchanged), got {cfg.mask_token_prob} + {cfg.random_token_prob}"
        )
    limit = getattr(cfg, "max_predictions_per_seq", None)
    if limit is not None and limit < 1:
        raise ConfigError(f"{prefix}.max_predictions_per_seq must be at least 1 or null (no cap), got {limit}")
    max_ngram = getattr(cfg, "max_ngram", 1)
    if max_ngram < 1:
        raise ConfigError(f"{prefix}.max_ngram must be at least 1, got {max_ngram}")


def word_spans(positions: list[int], continues: list[bool]) -> list[list[int]]:
    """Group a row's maskable positions into words: a position joins the previous word when its token continues
    a word and it directly follows that word's last position."""
    words: list[list[int]] = []
    for pos, cont in zip(positions, continues, strict=True):
        if words and cont and words[-1][-1] == pos - 1:
            words[-1].append(pos)
        else:
            words.append([pos])
    return words


def ngram_probabilities(max_ngram: int) -> torch.Tensor:
    """p(n) proportional to 1/n for n = 1..max_ngram (ALBERT section 4.1)."""
    weights = 1.0 / torch.arange(1, max_ngram + 1, dtype=torch.float64)
    return weights / weights.sum()


def choose_ngrams(num_words: int, count: int, max_ngram: int, lengths: Sequence[int], generator: torch.Generator):
    """Word-index spans of 1..max_ngram words whose pieces (``lengths[w]`` each) total at most ``count``.

    Every word index is a candidate start, visited in random order; n is drawn with p(n) ~ 1/n among the spans
    that fit before the end of the row, then shortened while the span overshoots the remaining budget; a span
    that overlaps an earlier one is skipped. Returns (spans, drawn n before shortening), the latter for tests.
    """
    probabilities = ngram_probabilities(max_ngram)
    covered: set[int] = set()
    spans: list[list[int]] = []
    drawn: list[int] = []
    used = 0
    for start in torch.randperm(num_words, generator=generator).tolist():
        if used >= count:
            break
        longest = min(max_ngram, num_words - start)
        n = int(torch.multinomial(probabilities[:longest], 1, generator=generator)) + 1
        drawn.append(n)
        while n > 1 and used + sum(lengths[start : start + n]) > count:
            n -= 1
        span = list(range(start, start + n))
        size = sum(lengths[w] for w in span)
        if used + size > count or covered.intersection(span):
            continue
        covered.update(span)
        spans.append(span)
        used += size
    return spans, drawn


def masking_from_config(cfg: Any, vocab: Any) -> MaskingTransform:
    """The transform an MLM-style objective config (mask_prob, ..., masking, max_ngram) describes over ``vocab``.

    Random replacements come from the tokenizer's ids, which may be fewer than the (padded) embedding rows.
    """
    return MaskingTransform(
        vocab_size=vocab.size,
        mask_id=vocab.require("mask_id", "masked language modeling"),
        special_ids=vocab.special_ids,
        mask_prob=cfg.mask_prob,
        mask_token_prob=cfg.mask_token_prob,
        random_token_prob=cfg.random_token_prob,
        max_predictions_per_seq=cfg.max_predictions_per_seq,
        masking=getattr(cfg, "masking", "token"),
        max_ngram=getattr(cfg, "max_ngram", 1),
        continuation_ids=vocab.continuation_ids,
    )


class MaskingTransform:
    """The MLM batch transform: replaces ``input_ids`` by the corrupted ids and adds ``mlm_labels``.

    ``mlm_labels`` holds the original id at each target position and ``IGNORE_INDEX`` elsewhere. A plain class of
    ints and floats, so it pickles into data-loader workers.
    """

    def __init__(
        self,
        vocab_size: int,
        mask_id: int,
        special_ids: Sequence[int],
        mask_prob: float = 0.15,
        mask_token_prob: float = 0.8,
        random_token_prob: float = 0.1,
        max_predictions_per_seq: int | None = None,
        masking: str = "token",
        max_ngram: int = 1,
        continuation_ids: Sequence[int] = (),
    ):
        self.vocab_size = vocab_size
        self.mask_id = mask_id
        # Sorted, so that a draw in [0, vocab_size - len(special_ids)) maps onto the non-special ids in order.
        self.special_ids = tuple(sorted(set(special_ids)))
        self.mask_prob = mask_prob
        self.mask_token_prob = mask_token_prob
        self.random_token_prob = random_token_prob
        self.max_predictions_per_seq = max_predictions_per_seq
        self.masking = getattr(masking, "value", masking)
        self.max_ngram = max_ngram
        # Ids of pieces that continue a word; a plain frozenset of ints, so the transform stays picklable.
        self.continuation_ids = frozenset(int(i) for i in continuation_ids)
        check_masking_config(self, finds_units=True)
        if vocab_size <= len(self.special_ids):
            raise ConfigError(f"a vocabulary of {vocab_size} ids has no non-special token to draw from")
        # The non-special ids, ascending: a replacement draw in [0, V - k) indexes them.
        keep = torch.ones(vocab_size, dtype=torch.bool, device="cpu")  # on the CPU also where a model is built on meta
        keep[[i for i in self.special_ids if 0 <= i < vocab_size]] = False
        self.ordinary_ids = keep.nonzero().squeeze(1)

    def num_targets(self, num_maskable: int) -> int:
        """Targets of a row with ``num_maskable`` maskable positions (at least one when it has any)."""
        if num_maskable == 0 or self.mask_prob == 0.0:
            return 0
        count = max(1, int(round(num_maskable * self.mask_prob)))
        if self.max_predictions_per_seq is not None:
            count = min(count, self.max_predictions_per_seq)
        return min(count, num_maskable)

    def target_budget(self, rows: int, width: int, sequences: int) -> int:
        """At least the targets of any batch of ``sequences`` sequences in ``rows`` rows of ``width`` tokens (a
        packed batch has fewer rows than sequences), from the shape alone, rounded up to a multiple of 8: the length
        of ``mlm_positions``. Each sequence has at most num_targets(width) targets, and at most
        mask_prob x its length + 1 (the rounding up to one target)."""
        most = sequences * self.num_targets(width)
        if self.max_predictions_per_seq is None:
            most = min(most, math.ceil(self.mask_prob * rows * width) + sequences)
        return -(-most // 8) * 8

    def _random_tokens(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """``n`` ids drawn uniformly from the non-special ids: a draw in [0, V - k) indexes them in ascending order."""
        ids = torch.randint(self.vocab_size - len(self.special_ids), (n,), generator=generator)
        return self.ordinary_ids[ids]

    def __call__(
        self, batch: dict[str, torch.Tensor], seeds: Sequence[int], level: int = WORD_LEVEL
    ) -> dict[str, torch.Tensor]:
        """Mask ``batch``; ``level`` is the join level that groups knowledge units (masking=knowledge only)."""
        input_ids = batch["input_ids"]
        if len(seeds) != input_ids.shape[0]:
            raise ValueError(f"got {len(seeds)} seeds for a batch of {input_ids.shape[0]} rows")
        maskable = batch["attention_mask"].bool() & ~batch["special_tokens_mask"].bool()  # (B, T)
        # Each row draws from its own generator; the writes into the batch are made once, for all rows, at the end.
        target_rows, columns, actions, replacements = [], [], [], []
        # (L_i,) each row's maskable positions, from one pass over the batch.
        per_row = maskable.nonzero()[:, 1].split(maskable.sum(dim=1).tolist())
        for row, (seed, positions) in enumerate(zip(seeds, per_row, strict=True)):
            count = self.num_targets(positions.numel())
            if count == 0:
                continue
            generator = torch.Generator().manual_seed(int(seed))
            if self.masking == "token":
                # Fixed draw sizes (L_i, then count, count) keep the stream independent of padding and grouping.
                chosen = positions[torch.randperm(positions.numel(), generator=generator)[:count]]
                action = torch.rand(count, generator=generator)
            elif self.masking == "knowledge":
                units = self._choose_units(positions.tolist(), batch, row, level, count, generator)
                chosen = torch.tensor([p for unit in units for p in unit], dtype=torch.long)
                count = chosen.numel()
                # One draw per unit, repeated over its tokens: a unit is masked, replaced or kept as a whole.
                per_unit = torch.rand(len(units), generator=generator)
                action = per_unit[torch.tensor([i for i, unit in enumerate(units) for _ in unit], dtype=torch.long)]
            else:
                chosen = self._choose_words(positions.tolist(), batch, row, count, generator)
                count = chosen.numel()
                action = torch.rand(count, generator=generator)
            replacements.append(self._random_tokens(count, generator))
            target_rows.append(torch.full((count,), row, dtype=torch.long))
            columns.append(chosen)
            actions.append(action)
        corrupted = input_ids.clone()
        labels = torch.full_like(input_ids, IGNORE_INDEX)
        if target_rows:
            row_of, column, action, replacement = (torch.cat(v) for v in (target_rows, columns, actions, replacements))
            labels[row_of, column] = input_ids[row_of, column]
            to_mask = action < self.mask_token_prob
            to_random = ~to_mask & (action < self.mask_token_prob + self.random_token_prob)
            corrupted[row_of[to_mask], column[to_mask]] = self.mask_id
            corrupted[row_of[to_random], column[to_random]] = replacement[to_random]
        rows, width = input_ids.shape
        positions = target_positions(labels, self.target_budget(rows, width, rows))  # (N,)
        return {**batch, "input_ids": corrupted, "mlm_labels": labels, "mlm_positions": positions}

    def _groups(self, positions: list[int], batch: dict[str, torch.Tensor], row: int, level: int) -> list[list[int]]:
        """The row's maskable positions grouped into units: by the ``units`` join codes at ``level`` when the batch
        has them, else into words by the tokenizer's continuation pieces."""
        if "units" in batch:
            codes = batch["units"][row]
            return word_spans(positions, [int(codes[p]) <= level for p in positions])
        if self.masking == "knowledge":
            raise ValueError("masking=knowledge needs the batch's units column (a corpus tokenized with its units)")
        ids = batch["input_ids"][row]
        return word_spans(positions, [int(ids[p]) in self.continuation_ids for p in positions])

    def _choose_units(
        self,
        positions: list[int],
        batch: dict[str, torch.Tensor],
        row: int,
        level: int,
        count: int,
        generator: torch.Generator,
    ) -> list[list[int]]:
        """Whole units in random order, each taken when it still fits the row's ``count`` targets."""
        units = self._groups(positions, batch, row, level)
        chosen: list[list[int]] = []
        used = 0
        for u in torch.randperm(len(units), generator=generator).tolist():
            if used + len(units[u]) <= count:
                chosen.append(units[u])
                used += len(units[u])
        return chosen

    def _choose_words(
        self, positions: list[int], batch: dict[str, torch.Tensor], row: int, count: int, generator: torch.Generator
    ) -> torch.Tensor:
        """Target positions made of whole words (``whole_word``) or n-grams of whole words (``ngram``)."""
        if self.masking == "whole_word":
            units = self._choose_units(positions, batch, row, WORD_LEVEL, count, generator)
            chosen = [p for unit in units for p in unit]
        else:
            words = self._groups(positions, batch, row, WORD_LEVEL)
            spans, _ = choose_ngrams(len(words), count, self.max_ngram, [len(w) for w in words], generator)
            chosen = [p for span in spans for w in span for p in words[w]]
        return torch.tensor(chosen, dtype=torch.long)
