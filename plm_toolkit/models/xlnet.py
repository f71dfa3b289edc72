"""XLNet (Yang et al. 2019, https://arxiv.org/abs/1906.08237): Transformer-XL's relative attention and segment memory
(``nn/relative_attention.py``) with two-stream self-attention (section 2.3) and relative segment encodings
(section 2.5).

Two streams share every weight. The content stream h_t is an ordinary representation of x_{z<=t}; the query
stream g_t starts from one learned vector w (``mask_embedding``) and sees x_{z<t} and the position z_t but never
the content x_{z_t}, so it can predict x_{z_t}. Which positions each one may see is the permutation mask the
``plm`` objective samples; the query stream only runs when a ``target_mapping`` names the predicted positions.
Fine-tuning passes neither and gets the content stream alone, a bidirectional encoder.

Inputs are laid out [A, SEP, B, SEP, CLS] (CLS last) with token types 0 / 1 / 2; the segment term only asks
whether two positions share a segment, so there is no absolute segment embedding. Submodule names map one to one
onto transformers' XLNetLMHeadModel (``interop/hf_xlnet.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from plm_toolkit.core.data_schema import TokenizerKind
from plm_toolkit.core.errors import ConfigError
from plm_toolkit.core.registry import MODELS
from plm_toolkit.models.base import (
    BIDIRECTIONAL,
    RECURRENT_MEMORY,
    SEGMENTS,
    TWO_STREAM,
    Backbone,
    FamilyConfig,
    Representations,
    check_vocab_size,
)
from plm_toolkit.nn.feed_forward import HiddenAct
from plm_toolkit.nn.relative_attention import (
    PositionwiseFeedForward,
    RelativeMultiHeadAttention,
    relative_distances,
    sinusoid_embedding,
    update_memory,
)


@dataclass
class XLNetConfig(FamilyConfig):
    # Registry name of the family.
    name: str = "xlnet"
    # Rows of the token embedding; null takes the tokenizer's size (the trainer fills it in before building).
    vocab_size: int | None = None
    # Vocabulary that a trained tokenizer gets when data.tokenizer.kind=auto: XLNet's SentencePiece-style unigram.
    tokenizer: TokenizerKind = TokenizerKind.unigram
    # Width of every layer's input and output (d_model).
    hidden_size: int = 768
    # Number of layers.
    num_layers: int = 12
    # Attention heads per layer.
    num_heads: int = 12
    # Width of one head (d_head); null means hidden_size / num_heads.
    head_size: int | None = 64
    # Inner width of the feed-forward block (d_inner).
    intermediate_size: int = 3072
    # Feed-forward activation (the released models use gelu).
    hidden_act: HiddenAct = HiddenAct.gelu
    # Dropout on embeddings, position features and each sub-block's output.
    hidden_dropout: float = 0.1
    # Dropout on the attention probabilities.
    attention_dropout: float = 0.1
    # Content-stream states per layer cached for the next segment (paper: 384 in pretraining); 0 = no memory.
    mem_len: int = 384
    # Relative distances beyond this share the embedding of clamp_len; -1 never clamps.
    clamp_len: int = -1
    # Bidirectional data (section 2.6 / the released code's bi_data): the second half of each batch holds
    # reversed text and reads relative distances negated. The batch size must be even.
    bi_data: bool = False
    # Epsilon of every LayerNorm.
    layer_norm_eps: float = 1e-12
    # Standard deviation of the normal initialization of weights, embeddings and attention biases.
    initializer_range: float = 0.02


class XLNetLayer(nn.Module):
    """Two-stream relative attention and the feed-forward block, the same weights for both streams."""

    def __init__(self, config: XLNetConfig, head_size: int):
        super().__init__()
        self.attention = RelativeMultiHeadAttention(
            config.hidden_size,
            config.num_heads,
            head_size,
            config.hidden_dropout,
            config.attention_dropout,
            config.layer_norm_eps,
            segments=True,
        )
        self.feed_forward = PositionwiseFeedForward(
            config.hidden_size,
            config.intermediate_size,
            config.hidden_act,
            config.hidden_dropout,
            config.layer_norm_eps,
        )

    def forward(self, h, g, memory, positions, content_mask, query_mask, segment_differs, target_mapping):
        att = self.attention
        context = h if memory is None else torch.cat([memory, h], dim=1)  # (B, M + T, H)
        k, v, r = att.keys_values(context, positions)  # shared by both streams
        h_next = att.finish(h, att.attend(att.heads(att.query(h)), k, v, r, content_mask, segment_differs))
        if g is not None:
            # Each query row sits at its target's position: scatter (B, P) rows to (B, T) positions so the
            # relative term sees position z_t, attend under the query mask, gather the P rows back.
            q = torch.einsum("bpnd,bpt->btnd", att.heads(att.query(g)), target_mapping)  # (B, T, nh, hs)
            attended = att.attend(q, k, v, r, query_mask, segment_differs)  # (B, T, nh * hs)
            attended = torch.einsum("btd,bpt->bpd", attended, target_mapping)  # (B, P, nh * hs)
            g = self.feed_forward(att.finish(g, attended))
        return self.feed_forward(h_next), g


@MODELS.register("xlnet", XLNetConfig)
class XLNet(Backbone):
    capabilities = frozenset({BIDIRECTIONAL, SEGMENTS, TWO_STREAM, RECURRENT_MEMORY})
    fields_at_least_zero = frozenset({"mem_len"})
    # XLNet's layout ends with <cls> (A <sep> B <sep> <cls>): sentence-level heads read the last real token.
    summary_position = "last"
    summary_token = "<cls>"

    def __init__(self, config: XLNetConfig):
        super().__init__()
        check_vocab_size(config)
        self.check_config(config)
        self.config = config
        head_size = config.head_size or config.hidden_size // config.num_heads
        self.word_embedding = nn.Embedding(config.vocab_size, config.hidden_size)
        # w, the query stream's input at every predicted position (section 2.3).
        self.mask_embedding = nn.Parameter(torch.zeros(config.hidden_size))
        self.layers = nn.ModuleList(XLNetLayer(config, head_size) for _ in range(config.num_layers))
        self.dropout = nn.Dropout(config.hidden_dropout)
        self.apply(self._init_weights)
        nn.init.normal_(self.mask_embedding, std=config.initializer_range)

    @classmethod
    def run_problems(cls, cfg) -> list[str]:
        """bi_data reads half of every batch backwards: the batch must split in two."""
        if cfg.model.get("bi_data") and cfg.trainer.batch_size % 2:
            return [
                f"model.bi_data=true reads half of every batch backwards: trainer.batch_size={cfg.trainer.batch_size} "
                "must be even"
            ]
        return []

    def _init_weights(self, module: nn.Module) -> None:
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
        elif isinstance(module, RelativeMultiHeadAttention):
            for p in (module.content_bias, module.position_bias, module.segment_bias, module.segment_embed):
                nn.init.normal_(p, std=std)

    @property
    def input_embeddings(self) -> nn.Embedding:
        return self.word_embedding

    def positions(self, query_len: int, key_len: int, batch_size: int, device) -> torch.Tensor:
        """(1 or B, K + T, H) sinusoids of distances K .. -T + 1; with bi_data the second half of the batch
        reads them negated (its text runs backwards)."""
        distances = relative_distances(query_len, key_len, True, self.config.clamp_len, device)  # (K + T,)
        forward = sinusoid_embedding(distances, self.config.hidden_size)[None]  # (1, K + T, H)
        if not self.config.bi_data:
            return forward
        if batch_size % 2:
            raise ConfigError(f"model.bi_data needs an even batch size, got {batch_size}")
        backward = sinusoid_embedding(-distances, self.config.hidden_size)[None]  # (1, K + T, H)
        half = batch_size // 2
        return torch.cat([forward.expand(half, -1, -1), backward.expand(half, -1, -1)])  # (B, K + T, H)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        memories: list[torch.Tensor] | None = None,
        perm_mask: torch.Tensor | None = None,
        target_mapping: torch.Tensor | None = None,
        mem_len: int | None = None,
        reuse_len: int | None = None,
        output_all_hidden: bool = False,
        **_: torch.Tensor,
    ) -> Representations:
        """(B, T) ids -> content stream (B, T, H) as ``hidden``; with ``target_mapping`` (B, P, T) also the query
        stream (B, P, H) as ``extras["query"]``; the next memories from the first ``reuse_len`` positions. With
        ``output_all_hidden``, ``all_hidden`` holds the content stream's input and every layer's output.

        ``perm_mask[b, i, j]`` = 1 forbids position i to see position j (transformers' convention); memory is
        always visible. Without perm_mask every token sees every non-padding token.
        """
        batch, query_len = input_ids.shape
        mem_len = self.config.mem_len if mem_len is None else mem_len
        memory_len = 0 if not memories else memories[0].shape[1]
        key_len = memory_len + query_len
        device = input_ids.device

        # Count the reasons position i may not see j (a permutation rule, a padding key); memory adds none.
        blocked = torch.zeros(batch, query_len, query_len, device=device)  # (B, T, T)
        if perm_mask is not None:
            blocked = blocked + perm_mask.to(blocked.dtype)
        if attention_mask is not None:
            blocked = blocked + (1 - attention_mask.to(blocked.dtype))[:, None, :]
        blocked = torch.cat([blocked.new_zeros(batch, query_len, memory_len), blocked], dim=2)  # (B, T, K)
        query_mask = blocked == 0
        # The content stream also sees its own position (h_{z_t} encodes x_{z_t} itself).
        own = torch.zeros(query_len, key_len, dtype=torch.bool, device=device)  # (T, K): True at (i, M + i)
        own[torch.arange(query_len), memory_len + torch.arange(query_len)] = True
        content_mask = query_mask | own[None]

        segment_differs = None
        if token_type_ids is not None:
            memory_types = token_type_ids.new_zeros(batch, memory_len)  # memory counts as segment 0
            key_types = torch.cat([memory_types, token_type_ids], dim=1)  # (B, K)
            segment_differs = token_type_ids[:, :, None] != key_types[:, None, :]  # (B, T, K)

        h = self.dropout(self.word_embedding(input_ids))  # (B, T, H)
        g = None
        if target_mapping is not None:
            target_mapping = target_mapping.to(h.dtype)
            g = self.dropout(self.mask_embedding.expand(batch, target_mapping.shape[1], -1))  # (B, P, H)
        positions = self.dropout(self.positions(query_len, key_len, batch, device).to(h.dtype))
        next_memories = []
        all_hidden = [h] if output_all_hidden else None
        for i, layer in enumerate(self.layers):
            memory = memories[i] if memories else None
            next_memories.append(update_memory(memory, h, mem_len, reuse_len))
            h, g = layer(h, g, memory, positions, content_mask, query_mask, segment_differs, target_mapping)
            if all_hidden is not None:
                all_hidden.append(h)
        extras = {} if g is None else {"query": self.dropout(g)}
        return Representations(
            hidden=self.dropout(h),
            memories=next_memories if mem_len > 0 else None,
            extras=extras,
            all_hidden=all_hidden,
        )
