"""What every backbone returns and declares.

A backbone maps token ids to representations and nothing more: heads and losses belong to objectives (pretraining)
and tasks (fine-tuning). Backbones never look at devices, precision or process groups.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import nn

# The capabilities an objective or task may ask of a backbone (validation matches them before anything is built).
BIDIRECTIONAL = "bidirectional"  # every position sees the whole sequence (MLM, RTD, NSP)
CAUSAL = "causal"  # position t sees only positions <= t (causal LM)
SEGMENTS = "segments"  # takes token_type_ids for sentence A / B
POOLER = "pooler"  # returns a pooled summary vector (NSP, sequence classification)
TWO_STREAM = "two_stream"  # content + query streams (XLNet's permutation LM)
ENCODER_DECODER = "encoder_decoder"  # separate encoder and decoder stacks (T5, Transformer)
RECURRENT_MEMORY = "recurrent_memory"  # state carried from one batch to the next (Transformer-XL, XLNet, ELMo)
CHARACTERS = "characters"  # reads each word as character ids (``char_ids``, data/characters.py) instead of token ids


@dataclass
class Representations:
    """A backbone's output.

    ``hidden`` is the last layer, (batch, seq, hidden). ``pooled`` is the sequence summary, (batch, hidden), where
    the family defines one. Families with more to say fill the optional fields rather than subclassing.
    """

    hidden: torch.Tensor
    pooled: torch.Tensor | None = None
    all_hidden: list[torch.Tensor] | None = None  # every layer's output, when asked for
    memories: list[torch.Tensor] | None = None  # Transformer-XL / XLNet segment memory
    extras: dict[str, torch.Tensor] = field(default_factory=dict)


class Backbone(nn.Module):
    """Base class of every model family.

    Subclasses set ``capabilities`` and keep their typed config in ``self.config``. Objectives that tie an output
    layer to the input embeddings use ``input_embeddings``.
    """

    capabilities: ClassVar[frozenset[str]] = frozenset()
    # Where the sequence-summary token sits, for fine-tuning heads when there is no pooled vector: "first"
    # ([CLS], the BERT family) or "last" (XLNet puts <cls> at the end).
    summary_position: ClassVar[str] = "first"

    @property
    def input_embeddings(self) -> nn.Embedding:
        raise NotImplementedError

    @property
    def representation_size(self) -> int:
        """Width of ``Representations.hidden`` and of every ``all_hidden`` layer (what task heads read)."""
        return int(self.config.hidden_size)

    @property
    def representation_layers(self) -> int:
        """How many tensors ``all_hidden`` holds: the embedding output and every layer's output."""
        return int(self.config.num_layers) + 1

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
