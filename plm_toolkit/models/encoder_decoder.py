"""Generation for encoder-decoder families (T5, the Transformer): the ``Decoder`` of ``plm_toolkit/generation.py``
over a model with ``encode``, ``decode`` and ``new_cache``.

``prefill`` encodes the (right-padded) source once and runs the decoder on the start token; every ``step`` feeds
one token against the decoder's key/value cache, whose cross-attention keys and values were computed from the
encoder states at the first step; ``reorder`` follows beam search's surviving beams through the encoder states,
the source mask and the cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class EncoderDecoderState:
    # (B, S, H) encoder states and (B, S) source mask (1 = token).
    encoder_hidden: torch.Tensor
    attention_mask: torch.Tensor
    # One nn.layers.LayerCache per decoder layer.
    cache: Any


class EncoderDecoderDecoder:
    """``model.encode(input_ids, attention_mask)``, ``model.decode(ids, encoder_hidden, attention_mask, cache)``
    and ``model.new_cache()``; ``head`` maps (B, H) decoder states to (B, V) scores."""

    # Sources are right-padded and masked, so rows of any length share a batch.
    supports_padding = True

    def __init__(self, model, head, start_id: int):
        self.model, self.head, self.start_id = model, head, start_id

    def prefill(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, Any]:
        encoder_hidden = self.model.encode(input_ids, attention_mask)
        start = torch.full((input_ids.shape[0],), self.start_id, dtype=torch.long, device=input_ids.device)
        state = EncoderDecoderState(encoder_hidden, attention_mask, self.model.new_cache())
        return self.step(start, state)

    def step(self, tokens: torch.Tensor, state: EncoderDecoderState) -> tuple[torch.Tensor, EncoderDecoderState]:
        hidden = self.model.decode(tokens[:, None], state.encoder_hidden, state.attention_mask, state.cache)
        return self.head(hidden[:, -1]), state

    def reorder(self, state: EncoderDecoderState, index: torch.Tensor) -> EncoderDecoderState:
        for layer in state.cache:
            layer.reorder(index)
        return EncoderDecoderState(state.encoder_hidden[index], state.attention_mask[index], state.cache)
