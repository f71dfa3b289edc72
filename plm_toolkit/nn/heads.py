"""Output heads that objectives put on top of a backbone's representations.

Parameter names follow the reference BERT checkpoint's ``cls.predictions`` block (``transform.dense``,
``transform.LayerNorm``, ``bias``) one to one, so the Hugging Face adapter maps them key for key.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

_ACTIVATIONS = {
    # BERT's gelu is the exact erf form; gelu_tanh is GPT-2's approximation.
    "gelu": F.gelu,
    "gelu_tanh": partial(F.gelu, approximate="tanh"),
    "relu": F.relu,
}


def activation(name: str):
    """The activation function called ``name`` (a str or a str-valued Enum)."""
    key = getattr(name, "value", name)
    if key not in _ACTIVATIONS:
        raise ValueError(f"unknown activation {key!r}; valid: {', '.join(sorted(_ACTIVATIONS))}")
    return _ACTIVATIONS[key]


def head_activation(config) -> str:
    """The masked-LM head's activation in a model config: ``head_act``, else ``hidden_act``."""
    return getattr(config, "head_act", None) or config.hidden_act


def masked_lm_head(config) -> MaskedLMHead:
    """BERT's masked-LM head for a model config: its width, vocabulary, head activation, LayerNorm epsilon,
    initializer range and, with a factorized embedding (ALBERT, ELECTRA's generator), the width E it decodes from."""
    return MaskedLMHead(
        config.hidden_size,
        config.vocab_size,
        head_activation(config),
        config.layer_norm_eps,
        initializer_range=getattr(config, "initializer_range", 0.02),
        embedding_size=getattr(config, "embedding_size", None),
    )


class MaskedLMHead(nn.Module):
    """BERT's masked-LM head: dense -> activation -> LayerNorm -> decoder tied to the input embedding.

    With a factorized embedding (ALBERT, ELECTRA's generator) ``embedding_size`` E differs from the model width:
    the dense layer maps H -> E so that the tied (vocab, E) matrix can decode it. The decoder weight is not a
    parameter here: ``forward`` takes the backbone's word-embedding matrix, so the tie survives any checkpoint round
    trip and the head never holds a copy of the (vocab, E) matrix.
    """

    def __init__(
        self,
        hidden_size: int,
        vocab_size: int,
        hidden_act: str,
        layer_norm_eps: float,
        initializer_range: float = 0.02,
        embedding_size: int | None = None,
    ):
        super().__init__()
        embedding_size = embedding_size or hidden_size
        self.act = activation(hidden_act)
        self.dense = nn.Linear(hidden_size, embedding_size)
        self.layer_norm = nn.LayerNorm(embedding_size, eps=layer_norm_eps)
        # The decoder's own bias: one score offset per vocabulary entry.
        self.bias = nn.Parameter(torch.zeros(vocab_size))
        self.initializer_range = initializer_range
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # BERT's init: normal(0, initializer_range) weights, zero biases, LayerNorm 1 / 0.
        nn.init.normal_(self.dense.weight, mean=0.0, std=self.initializer_range)
        nn.init.zeros_(self.dense.bias)
        nn.init.ones_(self.layer_norm.weight)
        nn.init.zeros_(self.layer_norm.bias)
        nn.init.zeros_(self.bias)

    def transform(self, hidden: torch.Tensor) -> torch.Tensor:
        """(..., H) states -> (..., E): what the tied decoder projects (with ``self.bias``) onto the vocabulary."""
        return self.layer_norm(self.act(self.dense(hidden)))

    def forward(self, hidden: torch.Tensor, embedding_weight: torch.Tensor) -> torch.Tensor:
        """(..., H) states and the (vocab, E) embedding matrix -> (..., vocab) logits."""
        return F.linear(self.transform(hidden), embedding_weight, self.bias)
