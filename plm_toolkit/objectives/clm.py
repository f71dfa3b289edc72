"""Causal language modeling: predict every next token of a segment from the tokens before it (and, for
Transformer-XL, from the memory of earlier segments).

The data are windows of one token stream (``data.packing=streams``; documents joined by the end-of-text token,
else [SEP]). For a model with recurrent memory (Transformer-XL) they are read in order: window k of a row continues
window k - 1 of the same row, so the memory this objective carries from batch to batch (``CarriedMemory``) holds
the hidden states of the text right before the current segment (Dai et al. 2019, section 3.2). Other causal models
(GPT) read them shuffled, each window on its own. The output layer is a softmax tied to the input embedding (with
a bias where the family has one: Transformer-XL yes, GPT no), or an adaptive softmax (Grave et al. 2017) with
``adaptive_softmax_cutoffs`` as in the paper's WikiText-103 models.

Logged: ``clm_loss`` (nats per token), ``eval_clm_perplexity`` (exp of it, for word-level data) and
``clm_bits_per_token`` (loss / ln 2: bits per character when the tokens are characters).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from plm_toolkit.core.errors import ConfigError
from plm_toolkit.core.registry import MODELS, OBJECTIVES
from plm_toolkit.data.batching.collate import IGNORE_INDEX
from plm_toolkit.data.layouts.plan import Layout
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.models.base import CAUSAL, RECURRENT_MEMORY
from plm_toolkit.nn.losses import linear_cross_entropy
from plm_toolkit.objectives.base import DataPlan, MemoryObjective, ObjectiveOutput


@dataclass
class ClmConfig:
    # Registry name of the objective.
    name: str = "clm"
    # Cluster boundaries of an adaptive softmax over frequency-sorted ids (Transformer-XL WikiText-103:
    # [20000, 40000, 200000]); empty = a full softmax tied to the input embedding.
    adaptive_softmax_cutoffs: list[int] = field(default_factory=list)
    # Each tail cluster's projection is this many times narrower than the previous one.
    adaptive_softmax_div_value: float = 4.0


@OBJECTIVES.register("clm", ClmConfig)
class CausalLanguageModeling(MemoryObjective):
    perplexity_components = frozenset({"clm"})
    required_capabilities = frozenset({CAUSAL})
    natural_layout = Layout.streams
    metric_denominators = {"clm_bits_per_token": "clm", "clm_correct": "clm"}

    def __init__(self, config: ClmConfig, model: nn.Module, vocab: Vocab):
        super().__init__()
        hidden_size, vocab_size = model.config.hidden_size, model.config.vocab_size
        self.recurrent = RECURRENT_MEMORY in type(model).capabilities
        cutoffs = list(config.adaptive_softmax_cutoffs)
        self.adaptive = None
        if cutoffs:
            if cutoffs[-1] >= vocab_size:
                raise ConfigError(
                    f"objective.adaptive_softmax_cutoffs={cutoffs}: the last cut-off must be below the vocabulary "
                    f"size {vocab_size}"
                )
            self.adaptive = nn.AdaptiveLogSoftmaxWithLoss(
                hidden_size, vocab_size, cutoffs, div_value=config.adaptive_softmax_div_value
            )
        elif getattr(type(model), "lm_head_bias", True):
            # The decoder is the input embedding (weights tied, as in the paper's code); only its bias lives here.
            self.bias = nn.Parameter(torch.zeros(vocab_size))
        else:
            self.bias = None  # GPT: the tied embedding alone, as its released checkpoints

    @classmethod
    def data_plan(cls, config, data_cfg, model_config) -> DataPlan:
        """Windows of max_seq_len + 1 tokens (inputs and their next-token targets), read in stream order by a
        model with recurrent memory (Transformer-XL: each row continues its text) and shuffled otherwise (GPT:
        every window stands alone, documents joined by the end-of-text token)."""
        plan = super().data_plan(config, data_cfg, model_config)
        recurrent = RECURRENT_MEMORY in MODELS.get(model_config.name).builder.capabilities
        return dataclasses.replace(plan, order="stream" if recurrent and plan.layout == Layout.streams else "shuffled")

    @classmethod
    def check_config(cls, config) -> None:
        cutoffs = list(config.adaptive_softmax_cutoffs)
        if cutoffs and (cutoffs != sorted(set(cutoffs)) or cutoffs[0] < 1):
            raise ConfigError(f"objective.adaptive_softmax_cutoffs={cutoffs}: expected increasing positive ids")
        if config.adaptive_softmax_div_value < 1.0:
            raise ConfigError("objective.adaptive_softmax_div_value must be at least 1")

    def next_token_logits(self, model: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
        """(B, H) last hidden states -> (B, V) scores of the next token (log-probabilities for an adaptive
        softmax): the LM head that generation (``plm_toolkit/generation/decoding.py``) decodes with."""
        if self.adaptive is not None:
            return self.adaptive.log_prob(hidden.float())
        return F.linear(hidden, model.input_embeddings.weight, self.bias)

    def target_counts(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        return {"clm": int(batch["attention_mask"][:, 1:].sum())}

    def forward(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        ids = batch["input_ids"]  # (B, T + 1): the inputs and, shifted by one, their targets
        inputs, labels = ids[:, :-1], ids[:, 1:]
        keep = batch["attention_mask"][:, 1:].bool()  # (B, T)
        if self.recurrent:
            memories = self.memory.get(self.training, batch)
            reps = model(input_ids=inputs, memories=memories)
            self.memory.set(self.training, reps.memories)
        else:
            # No padding mask: rows are right-padded, so under the causal mask a real token never sees padding, and
            # attention takes its fused causal path whatever the batch holds (no host sync, one compiled graph).
            reps = model(input_ids=inputs)
        hidden = reps.hidden.reshape(-1, reps.hidden.shape[-1])  # (B*T, H)
        gold = labels.masked_fill(~keep, IGNORE_INDEX).reshape(-1)  # (B*T,): padding is no target
        if self.adaptive is not None:
            # The adaptive softmax has no ignore_index: it reads the real targets only.
            hidden, gold = hidden[keep.reshape(-1)], gold[keep.reshape(-1)]  # (N, H), (N,)
            log_probs = self.adaptive(hidden.float(), gold).output  # (N,): log p(gold)
            loss_sum = -log_probs.sum()
            correct = (self.adaptive.predict(hidden.detach().float()) == gold).sum()
        else:
            # The (B*T, V) logits are never held at once (nn/losses.py).
            loss_sum, correct = linear_cross_entropy(
                hidden, model.input_embeddings.weight, self.bias, gold, ignore_index=IGNORE_INDEX
            )
        return ObjectiveOutput(
            loss_sums={"clm": loss_sum},
            metrics={"clm_bits_per_token": loss_sum.detach() / math.log(2), "clm_correct": correct},
        )
