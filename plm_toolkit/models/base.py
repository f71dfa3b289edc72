"""What every backbone returns and declares.

A backbone maps token ids to representations and nothing more: heads and losses belong to objectives (pretraining)
and tasks (fine-tuning). Backbones never look at devices, precision or process groups.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

# The capabilities live on the ground floor (validation reads them without importing a family); importable
# from here too, where the families and objectives name them.
from plm_toolkit.core.capabilities import (  # noqa: F401
    BIDIRECTIONAL,
    CAUSAL,
    CHARACTERS,
    ENCODER_DECODER,
    GENERATIVE,
    POOLER,
    RECURRENT_MEMORY,
    SEGMENTS,
    TWO_STREAM,
)
from plm_toolkit.core.errors import ConfigError
from plm_toolkit.generation.decoding import EncoderDecoderDecoder


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
    # The key/value cache after this call (one ``nn.layers.LayerCache`` per layer), when the caller passed one.
    cache: Any = None


def check_heads(config: Any) -> None:
    """hidden_size must split into num_heads heads unless the family has its own head_size."""
    if getattr(config, "head_size", None) is None and config.hidden_size % config.num_heads:
        settable = "; set model.head_size" if hasattr(config, "head_size") else ""
        raise ConfigError(
            f"model.hidden_size={config.hidden_size} is not divisible by model.num_heads={config.num_heads}{settable}"
        )


def check_vocab_size(config: Any) -> None:
    if config.vocab_size is None:
        raise ConfigError("model.vocab_size is null; set it or let the trainer take it from the tokenizer")


class FamilyConfig:
    """Base of every family's config dataclass (``@dataclass class BertConfig(FamilyConfig)``): the fields every family
    has, with their meaning written once. They come after the family's own fields (a dataclass base's would come
    first), so that a family's keys keep their order in its presets, its checkpoints' config.yaml and
    docs/configuration.md."""

    # plm-train: continue pretraining from these weights (a local Hugging Face folder, a plm-train checkpoint or
    # run directory, a bilm-tf folder); the family and every architecture field come from it, and its tokenizer is
    # used as is (docs/pretraining-and-data.md). null: fresh weights. The families ignore it.
    checkpoint: str | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # The family declares the shared fields as its own last ones (unless a dataclass it extends has them), so
        # that @dataclass, which runs after this, puts them after the family's fields.
        super().__init_subclass__(**kwargs)
        inherited = {name for base in cls.__mro__[1:] for name in getattr(base, "__dataclass_fields__", {})}
        own = dict(cls.__dict__.get("__annotations__", {}))
        for name, kind in FamilyConfig.__annotations__.items():
            if name not in inherited and name not in own:
                own[name] = kind
                setattr(cls, name, getattr(FamilyConfig, name))
        cls.__annotations__ = own


class Backbone(nn.Module):
    """Base class of every model family.

    Subclasses set ``capabilities`` and keep their typed config in ``self.config``. Objectives that tie an output
    layer to the input embeddings use ``input_embeddings``.

    An ``encoder_decoder`` backbone also serves the calls that teacher forcing, fine-tuning and decoding
    (``plm_toolkit/generation/decoding.py``) make: ``encode(input_ids, attention_mask) -> (B, S, H)``,
    ``decode(decoder_input_ids, encoder_hidden, attention_mask, cache=None, offset=None) -> (B, T, H)`` (``cache``
    from ``new_cache()``: one ``nn.layers.LayerCache`` per decoder layer, filled by the first call and extended by
    the next, ``reorder``-ed by beam search; ``offset``: the position of the first new token, by default the
    number cached), ``logits(hidden) -> (..., V)`` and ``decoder_start_token_id``; ``forward(input_ids,
    attention_mask, decoder_input_ids)`` returns the decoder's states. The Transformer and T5 serve exactly these;
    no code outside their files branches on either.
    """

    capabilities: ClassVar[frozenset[str]] = frozenset()
    # Where the sequence-summary token sits, for fine-tuning heads when there is no pooled vector: "first"
    # ([CLS], the BERT family) or "last" (XLNet puts <cls> at the end, a causal model sees everything only there).
    summary_position: ClassVar[str] = "first"
    # What a checkpoint's tokenizer must do for these weights (interop/tokenizer_roles.py checks its template of one
    # text): put the special token the family reads a text's summary from at summary_position (``summary_token``,
    # its name for messages: "[CLS]"), or, for a family that reads a text from its first token, put no special token
    # before the text but those of the family's own template of one text (``text_template``: "<s> A </s>", that of
    # the tokenizer kind its config's ``tokenizer`` field defaults to). None of either: not checked.
    summary_token: ClassVar[str | None] = None
    text_template: ClassVar[str | None] = None
    # Whether the family's language-model output layer has a bias of its own (Transformer-XL's does; GPT's decoder
    # is the input embedding alone): the causal LM objective follows it, so its checkpoints export exactly.
    lm_head_bias: ClassVar[bool] = True
    # Fields of this family's config that validation range-checks by name, besides the ones every family has
    # (config/checks.py: model_field_problems): counts that may be 0, counts of at least 1, positive numbers.
    fields_at_least_zero: ClassVar[frozenset[str]] = frozenset()
    fields_at_least_one: ClassVar[frozenset[str]] = frozenset()
    fields_above_zero: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def check_config(cls, config: Any) -> None:
        """Raise ConfigError naming the key for an impossible setting of this family; validation calls it before
        any work (with vocab_size possibly still null), the constructor again."""
        check_heads(config)

    @classmethod
    def run_problems(cls, cfg: Any) -> list[str]:
        """What this family refuses in the rest of a plm-train config (``cfg``, the whole composed config), one
        message each; validation asks before any work. Nothing by default."""
        return []

    @classmethod
    def max_length(cls, config: Any) -> int | None:
        """The longest sequence the family accepts (its position table), None when positions are relative."""
        if getattr(config, "max_position_embeddings", None) is None:
            return None
        return config.max_position_embeddings - getattr(config, "position_offset", 0)

    @property
    def input_embeddings(self) -> nn.Embedding:
        raise NotImplementedError

    @property
    def decoder_start_token_id(self) -> int:
        """Encoder-decoders: the first decoder input, and what targets are shifted right behind. The padding id by
        default (T5's convention); a family that starts from <s> overrides it."""
        return int(self.config.pad_token_id)

    @property
    def representation_size(self) -> int:
        """Width of ``Representations.hidden`` and of every ``all_hidden`` layer (what task heads read)."""
        return int(self.config.hidden_size)

    @property
    def representation_layers(self) -> int:
        """How many tensors ``all_hidden`` holds: the embedding output and every layer's output."""
        return int(self.config.num_layers) + 1

    def decoder(self, head):
        """What generation (``plm_toolkit/generation/decoding.py``) drives: prefill / step / reorder over a cache, with
        ``head`` mapping (B, H) hidden states to (B, V) next-token scores. Causal families implement it; an
        encoder-decoder serving the calls described above gets ``EncoderDecoderDecoder`` (``head``: its ``logits``)."""
        if ENCODER_DECODER in self.capabilities:
            return EncoderDecoderDecoder(self, head)
        raise ConfigError(f"model={self.config.name} is bidirectional: it cannot generate text")

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
