"""The objective contract.

An objective owns two things: a batch transform that runs on the CPU inside the data loader (masking, swaps,
permutation sampling) and a loss over the backbone's representations. Its ``forward`` returns per-component loss
*sums*; the loop divides each by that component's target count over the whole accumulation window and all
processes, so 8 micro-batches of 4 give the same gradient as one batch of 32.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import torch
from tokenizers import Tokenizer
from torch import nn

from plm_toolkit.data.batching.collate import Collator
from plm_toolkit.data.layouts.plan import BatchTransform, DataPlan, Layout
from plm_toolkit.data.layouts.registry import choose_layout
from plm_toolkit.data.tokenization.vocab import Vocab

__all__ = [
    "BatchTransform",
    "CarriedMemory",
    "DataPlan",
    "MemoryObjective",
    "Objective",
    "ObjectiveOutput",
    "normalized_loss",
]


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
    # The layout this objective's data comes in (data/layouts/plan.py LAYOUTS); ``data_plan`` resolves data.packing
    # against it.
    natural_layout: ClassVar[str] = Layout.full_sentences
    # metric name -> component whose target count divides it for logging.
    metric_denominators: ClassVar[dict[str, str]] = {}
    # Loss components that are per-token language-model cross-entropies: evaluation reports exp(loss) of each as
    # eval_<name>_perplexity (a sentence-level loss such as NSP's has no perplexity).
    perplexity_components: ClassVar[frozenset[str]] = frozenset()
    # Whether the loss reads packed rows (hardware.unpad, data/batching/packing.py): per-token losses only.
    reads_packed_rows: ClassVar[bool] = False
    # Devices (torch device types) where hardware.compile=null compiles the training step: where a compiled step
    # of this objective was measured faster than the eager one, compilation included (docs/speed-and-benchmarks.md).
    compiles_by_default: ClassVar[frozenset[str]] = frozenset()
    # Why this objective's batches cannot come in a few fixed shapes (so hardware.compile is not offered), or None.
    compile_refusal: ClassVar[str | None] = None
    # The heads a continued run carries over from another objective's checkpoint (training/continued.py): heads of
    # the same group fit each other's objectives (knowledge_masking's are MLM's); None: the objective's own name. An
    # objective that combines others keeps each one's heads under its name (``mlm.head.*``, ``nsp.head.*``) and
    # lists those groups in ``head_groups``.
    head_group: ClassVar[str | None] = None
    head_groups: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def head_key(cls, name: str, key: str) -> tuple[str, str]:
        """(group, key within it) of a key of this objective's state (``name``: the objective's registered name): a
        combined objective's keys are grouped by their first part (``head_groups``), any other's under
        ``head_group``, or ``name``."""
        first, _, rest = key.partition(".")
        if first in cls.head_groups:
            return first, rest
        return cls.head_group or name, key

    @classmethod
    def check_config(cls, config) -> None:
        """Raise ConfigError naming the key for an impossible setting; validation calls it before any work."""

    @classmethod
    def check_data(cls, config, data_cfg) -> None:
        """Like ``check_config``, for settings that are impossible only together with the data group's."""

    @classmethod
    def data_plan(cls, config, data_cfg, model_config) -> DataPlan:
        """Layout, window, order and static copies of this objective's data (``data/layouts/plan.py``), from the configs
        alone: validation asks before anything is built. The batch transform joins it once the objective exists
        (``plan.with_transform(objective.batch_transform())``). Raises ConfigError for a data.packing it cannot
        read. By default: ``natural_layout``, shuffled, dynamic; stream layouts take windows of the inputs and
        their next-token targets, one after the other."""
        layout = choose_layout(data_cfg, cls.natural_layout, config.name)
        if layout != Layout.streams:
            return DataPlan(layout, static_copies=int(getattr(config, "dupe_factor", 0) or 0))
        return DataPlan(layout, window=int(data_cfg.max_seq_len) + 1, stride=int(data_cfg.max_seq_len))

    def carried_state(self) -> dict[str, torch.Tensor]:
        """Tensors carried from one training micro-batch to the next (Transformer-XL / XLNet segment memories).
        The loop saves them with each checkpoint so that a resumed run continues exactly; empty by default."""
        return {}

    def load_carried_state(self, state: dict[str, torch.Tensor]) -> None:
        """Restore what ``carried_state`` returned (CPU tensors, read back from a checkpoint)."""

    def rewind_point(self) -> object:
        """What the objective carries between training batches, as it stands before a step (cheap: references,
        not copies); ``rewind`` returns to it when a signal drops the step half done."""
        return None

    def rewind(self, point: object) -> None:
        """Return to ``rewind_point``'s state."""

    def batch_transform(self) -> BatchTransform | None:
        """A picklable callable run in data-loader workers; None when the objective needs none."""
        return None

    def collator(self, vocab: Vocab) -> Callable:
        """What makes a batch of the layout's example rows (``data/batching/collate.py``): padded token rows."""
        return Collator(vocab)

    def attach_references(self, tokenizer: Tokenizer, references: list[str]) -> None:
        """The texts evaluation scores decoded outputs against (the run's data: translation's validation targets)
        and the tokenizer that detokenizes them; an objective that decodes nothing ignores them."""

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


class CarriedMemory:
    """Segment memories an objective carries between consecutive batches: one set for training, one for
    evaluation (dropped whenever evaluation starts, so evaluation never disturbs training's memory)."""

    def __init__(self) -> None:
        self._memories: dict[bool, list[torch.Tensor] | None] = {True: None, False: None}

    def get(self, training: bool, batch: dict[str, torch.Tensor]) -> list[torch.Tensor] | None:
        """The memories for ``batch``; none when the batch starts its streams afresh (``stream_start``): memory is
        reused only within the same context, as Transformer-XL starts every epoch from an empty memory."""
        memories = self._memories[training]
        ids = batch["input_ids"]
        if not memories or memories[0].shape[0] != ids.shape[0]:
            return None
        if "stream_start" in batch and bool(batch["stream_start"].any()):
            return None
        return [m.to(ids.device) for m in memories]

    def set(self, training: bool, memories: list[torch.Tensor] | None) -> None:
        self._memories[training] = [m.detach() for m in memories] if memories else None

    def reset(self, training: bool) -> None:
        self._memories[training] = None

    def training_memories(self) -> list[torch.Tensor] | None:
        return self._memories[True]

    def state(self) -> dict[str, torch.Tensor]:
        memories = self._memories[True] or []
        return {f"memory.{i}": m.detach().cpu() for i, m in enumerate(memories)}

    def load(self, state: dict[str, torch.Tensor]) -> None:
        layers = sorted((k for k in state if k.startswith("memory.")), key=lambda k: int(k.split(".")[1]))
        self._memories[True] = [state[k] for k in layers] or None


class MemoryObjective(Objective):
    """An objective that carries segment memories from one batch to the next (Transformer-XL's clm, XLNet's plm):
    evaluation starts from an empty memory, and the training memory travels with checkpoints."""

    def __init__(self) -> None:
        super().__init__()
        self.memory = CarriedMemory()

    def train(self, mode: bool = True):
        if not mode:
            self.memory.reset(False)  # every evaluation starts from an empty memory
        return super().train(mode)

    def carried_state(self) -> dict[str, torch.Tensor]:
        return self.memory.state()

    def rewind_point(self) -> object:
        return self.memory.training_memories()

    def rewind(self, point: object) -> None:
        self.memory.set(True, point)

    def load_carried_state(self, state: dict[str, torch.Tensor]) -> None:
        self.memory.load(state)
