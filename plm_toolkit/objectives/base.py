"""The objective contract.

An objective owns two things: a batch transform that runs on the CPU inside the data loader (masking, swaps,
permutation sampling) and a loss over the backbone's representations. Its ``forward`` returns per-component loss
*sums*; the loop divides each by that component's target count over the whole accumulation window and all
processes, so 8 micro-batches of 4 give the same gradient as one batch of 32.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import nn

# A batch transform: (collated CPU batch, one seed per row) -> batch. All randomness of row i comes from seeds[i]
# and is drawn over the row's unpadded length, so the result does not depend on how rows are grouped into
# micro-batches or processes, nor on how much padding a batch has.
BatchTransform = Callable[[dict[str, torch.Tensor], Sequence[int]], dict[str, torch.Tensor]]


@dataclass
class ObjectiveOutput:
    # Component name -> summed loss over its targets (any loss weight already applied).
    loss_sums: dict[str, torch.Tensor]
    # Metric name -> summed value (e.g. number of correct predictions); divided for logging by the target count of
    # the component that ``Objective.metric_denominators`` names.
    metrics: dict[str, torch.Tensor] = field(default_factory=dict)
    # Per-row outputs kept during evaluation (logits, row indices) and handed, concatenated over all batches and
    # processes, to ``Objective.finish_evaluation``; fine-tuning tasks decode predictions from them.
    outputs: dict[str, torch.Tensor] = field(default_factory=dict)


class Objective(nn.Module):
    """Base class: set the class attributes and implement ``target_counts`` and ``forward``."""

    # What the backbone must be able to do; validation refuses other backbones with a message.
    required_capabilities: ClassVar[frozenset[str]] = frozenset()
    # How the data is packed for this objective: "sentence_pairs" (two segments, NSP label) or
    # "full_sentences" (contiguous sentences filling the sequence, one segment).
    data_layout: ClassVar[str] = "full_sentences"
    # metric name -> component whose target count divides it for logging.
    metric_denominators: ClassVar[dict[str, str]] = {}
    # Whether evaluation reports exp(loss) per component (language-model losses) next to the loss.
    reports_perplexity: ClassVar[bool] = True

    @classmethod
    def check_config(cls, config) -> None:
        """Raise ConfigError naming the key for an impossible setting; validation calls it before any work."""

    def batch_transform(self) -> BatchTransform | None:
        """A picklable callable run in data-loader workers; None when the objective needs none."""
        return None

    def target_counts(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        """Number of targets per loss component in a transformed CPU batch."""
        raise NotImplementedError

    def forward(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:
        raise NotImplementedError

    def finish_evaluation(self, outputs: dict[str, torch.Tensor]) -> dict[str, float]:
        """Metrics over a whole evaluation from the rows' ``ObjectiveOutput.outputs`` (none by default)."""
        return {}


def normalized_loss(out: ObjectiveOutput, counts: dict[str, float]) -> torch.Tensor:
    """Sum over components of loss_sum / target count; a component with no targets contributes zero."""
    total = None
    for name, loss_sum in out.loss_sums.items():
        term = loss_sum / max(counts[name], 1.0)
        total = term if total is None else total + term
    assert total is not None, "an objective must return at least one loss component"
    return total
