"""Next-sentence prediction (Devlin et al. 2019, section 3.1, "Task #2: Next Sentence Prediction (NSP)").

A two-way classifier over the pooled [CLS] summary says whether segment B follows segment A in the corpus. The
data side (sentence-pair packing with random B half the time) makes the labels; this objective adds no transform.
Labels follow Hugging Face: 0 = B really follows A, 1 = B is random.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from plm_toolkit.core.registry import OBJECTIVES
from plm_toolkit.data.layouts.plan import Layout
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.models.base import BIDIRECTIONAL, POOLER, SEGMENTS, Representations
from plm_toolkit.objectives.base import Objective, ObjectiveOutput
from plm_toolkit.objectives.mlm import encode


@dataclass
class NspConfig:
    # Registry name of the objective.
    name: str = "nsp"


@OBJECTIVES.register("nsp", NspConfig)
class NextSentencePrediction(Objective):
    """NSP over ``next_sentence_label``; its metric sum ``nsp_correct`` is logged as ``nsp_accuracy``."""

    head_group = "nsp"
    required_capabilities = frozenset({BIDIRECTIONAL, POOLER, SEGMENTS})
    natural_layout = Layout.sentence_pairs
    # ``metrics["nsp_correct"]`` counts correct predictions; the loop logs it / count["nsp"] as nsp_accuracy.
    metric_denominators = {"nsp_correct": "nsp"}

    def __init__(self, config: NspConfig, model: nn.Module, vocab: Vocab):
        super().__init__()
        model_config = model.config
        # Named like the reference checkpoint's cls.seq_relationship, so the adapter maps it key for key.
        self.head = nn.Linear(model_config.hidden_size, 2)
        nn.init.normal_(self.head.weight, mean=0.0, std=getattr(model_config, "initializer_range", 0.02))
        nn.init.zeros_(self.head.bias)

    def target_counts(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        return {"nsp": int(batch["next_sentence_label"].shape[0])}

    def forward(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        return self.loss_from(encode(model, batch), batch, model)

    def loss_from(self, reps: Representations, batch: dict[str, torch.Tensor], model: nn.Module) -> ObjectiveOutput:
        """The loss over representations already computed (``MlmNsp`` shares one backbone pass with MLM)."""
        if reps.pooled is None:
            raise ValueError(f"{type(model).__name__} returned no pooled vector; NSP needs a backbone with a pooler")
        gold = batch["next_sentence_label"]  # (B,)
        logits = self.head(reps.pooled)  # (B, 2)
        loss_sum = F.cross_entropy(logits, gold, reduction="sum")
        correct = (logits.detach().argmax(dim=-1) == gold).sum()
        return ObjectiveOutput(loss_sums={"nsp": loss_sum}, metrics={"nsp_correct": correct})
