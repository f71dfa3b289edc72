"""Permutation language modeling with partial prediction (Yang et al. 2019, sections 2.2-2.3 and appendix A.1).

Each row is a window of the token stream laid out as XLNet's pretraining data: the first ``reuse_len`` tokens
continue the previous window's (their content states become the next window's memory), the rest is split into
A and B and framed as [reuse, A, SEP, B, SEP, CLS], token types 0 / 1 / 2 (the released data_utils.py).

The batch transform samples, per row and from the row's own seed:
  * the predicted tokens: spans of 1..max_span_length consecutive tokens, one span per context of span * K
    tokens, so about 1/K of the tokens (transformers' DataCollatorForPermutationLanguageModeling); SEP and CLS
    are never predicted;
  * a factorization order: the released code's local permutation (the same shuffle of perm_size offsets applied
    to every block of perm_size positions), separately for the reused part and for the rest, with every
    non-predicted token before every predicted one, so the targets are the last 1/K of the order;
  * the permutation mask ``perm_mask[i, j] = 1`` (i may not see j) that realises that order: a target sees the
    context and the targets earlier in the order, never itself nor a later one; context tokens see no target;
    the reused part never sees the rest (its states are cached as memory);
  * ``target_mapping`` (B, P, T) one-hot rows naming the predicted positions, ``target_ids`` and ``target_mask``.
The loss is the cross-entropy of the query stream's prediction at each target under an LM head tied to the
input embedding (transformers' ``lm_loss``: the embedding matrix plus a bias).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from plm_toolkit.core.errors import ConfigError
from plm_toolkit.core.registry import OBJECTIVES
from plm_toolkit.data.batching.collate import IGNORE_INDEX
from plm_toolkit.data.layouts.plan import Layout
from plm_toolkit.data.layouts.registry import choose_layout
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.models.base import TWO_STREAM
from plm_toolkit.objectives.base import BatchTransform, DataPlan, MemoryObjective, ObjectiveOutput

SPECIALS = 3  # SEP after A, SEP after B, CLS


@dataclass
class PlmConfig:
    # Registry name of the objective.
    name: str = "plm"
    # Partial prediction's K: about 1/K of the tokens are predicted, the last ones of each factorization order
    # (section 2.3; the paper uses 6 and 7).
    partial_prediction_k: float = 6.0
    # Longest run of consecutive tokens predicted together; lengths 1..max_span_length are equally likely.
    max_span_length: int = 5
    # Tokens at the start of each window whose content states become the next window's memory; the next window
    # starts reuse_len tokens later. null = half of data.max_seq_len (the paper: 256 of 512).
    reuse_len: int | None = None
    # Factorization orders permute positions within blocks of perm_size (the released code's local
    # permutation); must divide reuse_len and max_seq_len - reuse_len. null = reuse_len.
    perm_size: int | None = None


def sizes(config, max_seq_len: int) -> tuple[int, int]:
    """(reuse_len, perm_size) with their defaults filled in."""
    reuse_len = config.reuse_len if config.reuse_len is not None else max_seq_len // 2
    return reuse_len, config.perm_size if config.perm_size is not None else reuse_len


def span_targets(length: int, k: float, max_span_length: int, generator: torch.Generator) -> torch.Tensor:
    """(length,) bool: one span of 1..max_span_length tokens somewhere in each context of round(span * k)
    tokens, the contexts tiling the row (transformers' DataCollatorForPermutationLanguageModeling)."""
    chosen = torch.zeros(length, dtype=torch.bool)
    start = 0
    while start < length:
        span = int(torch.randint(1, max_span_length + 1, (1,), generator=generator))
        context = max(round(span * k), span)
        offset = int(torch.randint(0, context - span + 1, (1,), generator=generator))
        chosen[start + offset : start + offset + span] = True
        start += context
    return chosen


def most_targets(length: int, k: float, max_span_length: int) -> int:
    """At least the targets ``span_targets`` picks in a row of ``length`` tokens, from the length alone: each
    context holds one span, at most ``max_span_length`` / context of its tokens, and only the last context can be
    cut short; the row's two parts (reused and rest) each have one."""
    densest = max(span / max(round(span * k), span) for span in range(1, max_span_length + 1))
    return min(length, math.ceil(densest * length) + 2 * max_span_length)


def local_order(length: int, perm_size: int, generator: torch.Generator) -> torch.Tensor:
    """(length,) rank of each position in a factorization order that shuffles the perm_size offsets of every
    block of perm_size positions the same way (the released code's _local_perm)."""
    index = torch.arange(length).view(length // perm_size, perm_size).T  # (perm_size, blocks)
    index = index[torch.randperm(perm_size, generator=generator)]  # shuffle the offsets
    return index.T.reshape(-1)  # (length,)


def permutation_mask(rank: torch.Tensor, targets: torch.Tensor, functional: torch.Tensor) -> torch.Tensor:
    """(T, T) bool, True where i may NOT see j, for one part of a row (the released code's _local_perm).

    Context tokens (not predicted, not SEP/CLS) come first in the order and are seen by everyone; predicted and
    functional tokens follow in ``rank`` order. A target may see only earlier ranks (the query stream never its
    own content); SEP / CLS also see themselves; context tokens see none of them.
    """
    ordered = targets | functional
    rank = torch.where(ordered, rank, torch.full_like(rank, -1))
    own_rank = torch.where(targets, rank, rank + 1)
    return (own_rank[:, None] <= rank[None, :]) & ordered[None, :]


class PermutationTransform:
    """The PLM batch transform (picklable; runs in data-loader workers): stream windows -> XLNet inputs."""

    def __init__(self, config: PlmConfig, vocab: Vocab, bi_data: bool = False):
        self.k, self.max_span = float(config.partial_prediction_k), int(config.max_span_length)
        self.config, self.bi_data = config, bi_data
        self.sep_id = vocab.require("sep_id", "permutation LM's [reuse, A, SEP, B, SEP, CLS] layout")
        self.cls_id = vocab.require("cls_id", "permutation LM's [reuse, A, SEP, B, SEP, CLS] layout")

    def row(self, window: torch.Tensor, generator: torch.Generator) -> dict[str, torch.Tensor]:
        length = window.shape[0] + SPECIALS
        reuse_len, perm_size = sizes(self.config, length)
        rest = window[reuse_len:]
        split = int(torch.randint(1, rest.shape[0], (1,), generator=generator))  # A and B both non-empty
        sep, cls = torch.tensor([self.sep_id]), torch.tensor([self.cls_id])
        ids = torch.cat([window[:reuse_len], rest[:split], sep, rest[split:], sep, cls])  # (T,)
        first_sep = reuse_len + split
        types = torch.zeros(length, dtype=torch.long)
        types[first_sep + 1 :] = 1
        types[-1] = 2
        functional = torch.zeros(length, dtype=torch.bool)
        functional[[first_sep, length - 2, length - 1]] = True

        targets = torch.cat(
            [
                span_targets(reuse_len, self.k, self.max_span, generator),
                span_targets(length - reuse_len, self.k, self.max_span, generator),
            ]
        )
        targets &= ~functional
        perm_mask = torch.ones(length, length, dtype=torch.bool)
        parts = (slice(0, reuse_len), slice(reuse_len, length))
        for part in parts:
            rank = local_order(part.stop - part.start, perm_size, generator)
            perm_mask[part, part] = permutation_mask(rank, targets[part], functional[part])
        # The rest sees the whole reused part; the reused part never sees the rest, so its cached states hold
        # nothing of the text the next window's targets come from.
        perm_mask[reuse_len:, :reuse_len] = False
        return {"input_ids": ids, "token_type_ids": types, "perm_mask": perm_mask, "targets": targets}

    def __call__(self, batch: dict[str, torch.Tensor], seeds: Sequence[int]) -> dict[str, torch.Tensor]:
        windows = batch["input_ids"]  # (B, W)
        if self.bi_data:
            # bi_data: the second half of the batch reads its text backwards (the loader hands those rows their
            # windows last to first, see data/batching/loader.py StreamOrder), the model negates their distances.
            half = windows.shape[0] // 2
            windows = torch.cat([windows[:half], windows[half:].flip(1)])
        rows = [self.row(w, torch.Generator().manual_seed(s)) for w, s in zip(windows, seeds, strict=True)]
        length = rows[0]["input_ids"].shape[0]
        # A count fixed by the length (the released code's num_predict), so that every batch has one shape.
        predicted = most_targets(length, self.k, self.max_span)
        target_mapping = torch.zeros(len(rows), predicted, length)
        target_ids = torch.zeros(len(rows), predicted, dtype=torch.long)
        target_mask = torch.zeros(len(rows), predicted, dtype=torch.bool)
        for b, r in enumerate(rows):
            where = r["targets"].nonzero().squeeze(1)  # (n,) predicted positions in text order
            target_mapping[b, torch.arange(len(where)), where] = 1.0
            target_ids[b, : len(where)] = r["input_ids"][where]
            target_mask[b, : len(where)] = True
        return {
            "input_ids": torch.stack([r["input_ids"] for r in rows]),  # (B, T)
            "token_type_ids": torch.stack([r["token_type_ids"] for r in rows]),  # (B, T)
            "attention_mask": torch.ones(len(rows), length, dtype=torch.long),  # (B, T)
            "perm_mask": torch.stack([r["perm_mask"] for r in rows]),  # (B, T, T)
            "target_mapping": target_mapping,  # (B, P, T)
            "target_ids": target_ids,  # (B, P)
            "target_mask": target_mask,  # (B, P)
        }


@OBJECTIVES.register("plm", PlmConfig)
class PermutationLanguageModeling(MemoryObjective):
    perplexity_components = frozenset({"plm"})
    required_capabilities = frozenset({TWO_STREAM})
    natural_layout = Layout.streams
    metric_denominators = {"plm_correct": "plm"}

    def __init__(self, config: PlmConfig, model: nn.Module, vocab: Vocab):
        super().__init__()
        self.config = config
        # The LM head's decoder is the input embedding (tied, as in the released models); its bias lives here.
        self.bias = nn.Parameter(torch.zeros(model.config.vocab_size))
        self.backward_half = bool(getattr(model.config, "bi_data", False))
        self.transform = PermutationTransform(config, vocab, self.backward_half)

    @classmethod
    def data_plan(cls, config, data_cfg, model_config) -> DataPlan:
        """Stream windows of max_seq_len - 3 tokens (SEP, SEP, CLS are added per row) in stream order; window
        k + 1 starts where window k's reused part ends, so its reused part continues the memory. With the
        model's bi_data the second half of every batch reads backwards."""
        max_seq_len = int(data_cfg.max_seq_len)
        layout = choose_layout(data_cfg, cls.natural_layout, config.name)
        window, stride = max_seq_len - SPECIALS, sizes(config, max_seq_len)[0]
        backward = bool(getattr(model_config, "bi_data", False))
        return DataPlan(layout, window=window, stride=stride, order="stream", backward_half=backward)

    @classmethod
    def check_config(cls, config) -> None:
        if config.partial_prediction_k <= 1.0:
            raise ConfigError(f"objective.partial_prediction_k={config.partial_prediction_k}: must exceed 1")
        if config.max_span_length < 1:
            raise ConfigError(f"objective.max_span_length={config.max_span_length}: must be at least 1")

    @classmethod
    def check_data(cls, config, data_cfg) -> None:
        seq_len = int(data_cfg.max_seq_len)
        if seq_len % 2:
            raise ConfigError(f"data.max_seq_len={seq_len}: permutation LM needs an even sequence length")
        reuse_len, perm_size = sizes(config, seq_len)
        if not 0 < reuse_len <= seq_len - SPECIALS - 2:
            raise ConfigError(
                f"objective.reuse_len={reuse_len}: must be positive and leave at least 2 tokens of "
                f"data.max_seq_len={seq_len} for A and B besides SEP, SEP, CLS"
            )
        if not 0 < perm_size <= reuse_len:
            raise ConfigError(
                f"objective.perm_size={perm_size}: must be positive and at most objective.reuse_len={reuse_len}"
            )
        if reuse_len % perm_size or (seq_len - reuse_len) % perm_size:
            raise ConfigError(
                f"objective.perm_size={perm_size} must divide objective.reuse_len={reuse_len} and "
                f"data.max_seq_len - reuse_len = {seq_len - reuse_len}"
            )

    def batch_transform(self) -> BatchTransform:
        return self.transform

    def target_counts(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        return {"plm": int(batch["target_mask"].sum())}

    def forward(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        ids = batch["input_ids"]
        reuse_len = sizes(self.config, ids.shape[1])[0]
        reps = model(
            input_ids=ids,
            attention_mask=batch["attention_mask"],
            token_type_ids=batch["token_type_ids"],
            memories=self.memory.get(self.training, batch),
            perm_mask=batch["perm_mask"],
            target_mapping=batch["target_mapping"],
            reuse_len=reuse_len,
        )
        self.memory.set(self.training, reps.memories)
        keep = batch["target_mask"]  # (B, P): the slots that hold a target
        query = reps.extras["query"].flatten(0, 1)  # (B*P, H)
        gold = batch["target_ids"].masked_fill(~keep, IGNORE_INDEX).flatten()  # (B*P,)
        logits = F.linear(query, model.input_embeddings.weight, self.bias)  # (B*P, V)
        loss_sum = F.cross_entropy(logits.float(), gold, reduction="sum", ignore_index=IGNORE_INDEX)
        correct = ((logits.detach().argmax(dim=-1) == gold) & keep.flatten()).sum()
        return ObjectiveOutput(loss_sums={"plm": loss_sum}, metrics={"plm_correct": correct})
