"""Transformer-XL (Dai et al. 2019, https://arxiv.org/abs/1901.02860): a causal Transformer whose layers attend to
a memory of cached hidden states of earlier segments (section 3.2) with relative positional attention (section 3.3,
``nn/relative_attention.py``).

The backbone is stateless: ``forward(input_ids, memories)`` returns the hidden states and the next memories. Who
carries memories from one segment to the next (the ``clm`` objective during training, a script during evaluation)
decides when to reset them. The output layer (softmax or adaptive softmax) belongs to the ``clm`` objective.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from plm_toolkit.core.errors import ConfigError
from plm_toolkit.core.registry import MODELS
from plm_toolkit.models.base import CAUSAL, RECURRENT_MEMORY, Backbone, FamilyConfig, Representations, check_vocab_size
from plm_toolkit.nn.feed_forward import HiddenAct
from plm_toolkit.nn.relative_attention import (
    PositionwiseFeedForward,
    RelativeMultiHeadAttention,
    causal_memory_mask,
    relative_distances,
    sinusoid_embedding,
    update_memory,
)


@dataclass
class TransformerXLConfig(FamilyConfig):
    # Registry name of the family.
    name: str = "transformer_xl"
    # Rows of the token embedding; null takes the tokenizer's size (the trainer fills it in before building).
    vocab_size: int | None = None
    # Width of every layer's input and output (d_model).
    hidden_size: int = 410
    # Number of layers.
    num_layers: int = 16
    # Attention heads per layer.
    num_heads: int = 10
    # Width of one head (d_head); null means hidden_size / num_heads.
    head_size: int | None = 41
    # Inner width of the feed-forward block (d_inner).
    intermediate_size: int = 2100
    # Feed-forward activation (the paper's code uses relu).
    hidden_act: HiddenAct = HiddenAct.relu
    # Dropout on embeddings, position features and each sub-block's output.
    hidden_dropout: float = 0.1
    # Dropout on the attention probabilities (dropatt).
    attention_dropout: float = 0.0
    # Hidden states per layer cached from earlier segments during training (paper: 150 for WikiText-103 base).
    mem_len: int = 150
    # Memory length during evaluation; null = mem_len. Longer than mem_len is allowed (section 4.1: trained with
    # 150, evaluated with 1,600 on WikiText-103) since relative positions generalise to unseen distances.
    eval_mem_len: int | None = None
    # Relative distances beyond this share the embedding of clamp_len; -1 never clamps.
    clamp_len: int = -1
    # Epsilon of every LayerNorm.
    layer_norm_eps: float = 1e-5
    # Standard deviation of the normal initialization of weights and embeddings.
    initializer_range: float = 0.02


class TransformerXLLayer(nn.Module):
    """Relative attention over memory + segment, then the feed-forward block; both post-LN."""

    def __init__(self, config: TransformerXLConfig, head_size: int):
        super().__init__()
        self.attention = RelativeMultiHeadAttention(
            config.hidden_size,
            config.num_heads,
            head_size,
            config.hidden_dropout,
            config.attention_dropout,
            config.layer_norm_eps,
        )
        self.feed_forward = PositionwiseFeedForward(
            config.hidden_size,
            config.intermediate_size,
            config.hidden_act,
            config.hidden_dropout,
            config.layer_norm_eps,
        )

    def forward(self, hidden, memory, positions, may_attend):
        return self.feed_forward(self.attention(hidden, memory, positions, may_attend))


@MODELS.register("transformer_xl", TransformerXLConfig)
class TransformerXL(Backbone):
    capabilities = frozenset({CAUSAL, RECURRENT_MEMORY})
    fields_at_least_zero = frozenset({"mem_len", "eval_mem_len"})

    def __init__(self, config: TransformerXLConfig):
        super().__init__()
        check_vocab_size(config)
        self.check_config(config)
        self.config = config
        head_size = config.head_size or config.hidden_size // config.num_heads
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout)
        self.layers = nn.ModuleList(TransformerXLLayer(config, head_size) for _ in range(config.num_layers))
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, RelativeMultiHeadAttention):
            nn.init.normal_(module.content_bias, std=std)
            nn.init.normal_(module.position_bias, std=std)

    @property
    def input_embeddings(self) -> nn.Embedding:
        return self.word_embeddings

    def decoder(self, head) -> MemoryDecoder:
        """Generation over the segment memory (``plm_toolkit/generation/decoding.py``): each step feeds one token and
        attends to the cached states of the eval_mem_len (default mem_len) tokens before it."""
        if self.config.mem_len <= 0 and not self.config.eval_mem_len:
            raise ConfigError("model.mem_len=0: Transformer-XL generates through its memory and has none")
        return MemoryDecoder(self, head)

    def memory_length(self) -> int:
        """mem_len in training mode, eval_mem_len (default mem_len) in evaluation mode."""
        if self.training or self.config.eval_mem_len is None:
            return self.config.mem_len
        return self.config.eval_mem_len

    def forward(
        self,
        input_ids: torch.Tensor,
        memories: list[torch.Tensor] | None = None,
        attention_mask: torch.Tensor | None = None,
        mem_len: int | None = None,
        output_all_hidden: bool = False,
        **_: torch.Tensor,
    ) -> Representations:
        """(B, T) ids and per-layer (B, M, H) memories -> (B, T, H) hidden states and the next memories; with
        ``output_all_hidden`` also every layer's input and the last output (``all_hidden``).

        Streams have no padding; ``attention_mask`` is accepted for the shared batch format and ignored.
        """
        mem_len = self.memory_length() if mem_len is None else mem_len
        query_len = input_ids.shape[1]
        memory_len = 0 if not memories else memories[0].shape[1]
        # The paper's code scales embeddings by sqrt(d_model) before the first layer.
        hidden = self.dropout(self.word_embeddings(input_ids) * math.sqrt(self.config.hidden_size))  # (B, T, H)
        distances = relative_distances(
            query_len, memory_len + query_len, False, self.config.clamp_len, input_ids.device
        )
        positions = self.dropout(sinusoid_embedding(distances, self.config.hidden_size)[None])  # (1, M + T, H)
        positions = positions.to(hidden.dtype)
        may_attend = causal_memory_mask(query_len, memory_len, input_ids.device)[None]  # (1, T, M + T)
        next_memories = []
        all_hidden = [hidden] if output_all_hidden else None
        for i, layer in enumerate(self.layers):
            memory = memories[i] if memories else None
            # Each layer caches its own input (the previous layer's output), section 3.2.
            next_memories.append(update_memory(memory, hidden, mem_len))
            hidden = layer(hidden, memory, positions, may_attend)
            if all_hidden is not None:
                all_hidden.append(hidden)
        hidden = self.dropout(hidden)
        return Representations(hidden=hidden, memories=next_memories if mem_len > 0 else None, all_hidden=all_hidden)


class MemoryDecoder:
    """Transformer-XL's decoder state is its memory: the prompt fills it, every step extends it by one token
    (dropping the oldest beyond the memory length). Memories have no padding, so prompts of different lengths
    are decoded in separate batches."""

    supports_padding = False
    padding_side = "left"  # unused: every batch holds prompts of one length

    def __init__(self, model: TransformerXL, head):
        self.model, self.head = model, head

    def prefill(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        reps = self.model(input_ids)
        return self.head(reps.hidden[:, -1]), reps.memories

    def step(self, tokens: torch.Tensor, memories: list[torch.Tensor]):
        reps = self.model(tokens[:, None], memories=memories)
        return self.head(reps.hidden[:, -1]), reps.memories

    def reorder(self, memories: list[torch.Tensor], index: torch.Tensor) -> list[torch.Tensor]:
        return [memory.index_select(0, index) for memory in memories]
