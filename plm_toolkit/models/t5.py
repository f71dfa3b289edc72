"""T5 (Raffel et al. 2020, https://arxiv.org/abs/1910.10683): an encoder-decoder Transformer with pre-norm residual
blocks, RMS layer norm without bias or mean, no biases anywhere, and a relative position bias in place of position
embeddings (``nn/relative_bias.py``: 32 log-spaced buckets up to distance 128, bidirectional in the encoder, causal
in the decoder, one table per stack held by the first layer and shared by the others).

Attention scores are not divided by sqrt(d_head): the query projection's initialisation carries that factor
(Mesh TensorFlow's ``std = (d_model * d_kv) ** -0.5``). v1.0 ties the output layer to the shared embedding and
rescales the decoder output by d_model^-0.5 before it; v1.1 (``feed_forward: gated_gelu``, ``tie_word_embeddings:
false``) has a gated-GELU feed-forward, an untied output layer without the rescale, and no dropout in
pretraining.

The layers are the shared pre-norm ``TransformerLayer`` (``nn/layers.py``) with RMS norms, no biases, a score scale
of 1 and the stack's bias as an additive attention mask; ``interop/hf_t5.py`` maps their names to the released
checkpoints'.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from plm_toolkit.core.choices import choice, choices
from plm_toolkit.core.data_schema import TokenizerKind
from plm_toolkit.core.errors import ConfigError
from plm_toolkit.core.registry import MODELS
from plm_toolkit.models.base import ENCODER_DECODER, Backbone, FamilyConfig, Representations, check_vocab_size
from plm_toolkit.nn.attention import MultiHeadAttention, causal_mask
from plm_toolkit.nn.feed_forward import FeedForward
from plm_toolkit.nn.layers import LayerCache, TransformerLayer
from plm_toolkit.nn.relative_bias import RelativePositionBias

# relu: T5 v1.0's DenseReluDense; gated_gelu: v1.1's GEGLU (Shazeer 2020) with the tanh approximation of GELU.
T5FeedForwardKind = choices("T5FeedForwardKind", "relu", "gated_gelu")


@dataclass
class T5Config(FamilyConfig):
    # Registry name of the family.
    name: str = "t5"
    # Rows of the shared token embedding; null takes the tokenizer's size (the released checkpoints pad theirs to
    # 32128 for 32100 tokens).
    vocab_size: int | None = None
    # Vocabulary that a trained tokenizer gets when data.tokenizer.kind=auto: a SentencePiece-style unigram LM
    # with T5's <pad> </s> <unk> and 100 sentinels (t5_unigram).
    tokenizer: TokenizerKind = TokenizerKind.t5_unigram
    # Width of every layer's input and output (d_model).
    hidden_size: int = 512
    # Encoder layers.
    num_layers: int = 6
    # Decoder layers; null means num_layers.
    num_decoder_layers: int | None = None
    # Attention heads per layer.
    num_heads: int = 8
    # Width of one head (d_kv); T5 sets it apart from hidden_size / num_heads.
    head_size: int = 64
    # Inner width of the feed-forward block (d_ff).
    intermediate_size: int = 2048
    # Feed-forward: relu (v1.0) or gated_gelu (v1.1).
    feed_forward: T5FeedForwardKind = T5FeedForwardKind.relu
    # Buckets of the relative position bias.
    relative_attention_num_buckets: int = 32
    # Relative distances from this on share the last bucket.
    relative_attention_max_distance: int = 128
    # Dropout on embeddings, attention probabilities, the feed-forward's inner activations and every sub-block's
    # output (v1.0: 0.1; v1.1 pretrains without dropout).
    dropout: float = 0.1
    # Epsilon of every RMS layer norm.
    layer_norm_eps: float = 1e-6
    # v1.0: the output layer is the shared embedding, applied to decoder states rescaled by hidden_size^-0.5;
    # v1.1 (false): a separate output layer and no rescale.
    tie_word_embeddings: bool = True
    # Multiplies every initialisation standard deviation (Mesh TensorFlow's initializer_factor).
    initializer_factor: float = 1.0
    # Padding id; the trainer sets it to the tokenizer's. T5 also starts every decoder input with it.
    pad_token_id: int = 0


def t5_layer(config: T5Config, decoder: bool) -> TransformerLayer:
    """A pre-norm block with RMS norms, no biases and unscaled scores: x + dropout(attention(norm(x))),
    [x + dropout(cross_attention(norm(x), encoder))], x + dropout(feed_forward(norm(x)))."""
    gated = choice(config.feed_forward) == "gated_gelu"
    return TransformerLayer(
        config.hidden_size,
        config.num_heads,
        config.intermediate_size,
        hidden_act="gelu_tanh" if gated else "relu",
        hidden_dropout=config.dropout,
        attention_dropout=config.dropout,
        layer_norm_eps=config.layer_norm_eps,
        pre_norm=True,
        cross_attention=decoder,
        bias=False,
        head_size=config.head_size,
        norm="rms",
        attention_scale=1.0,
        feed_forward_dropout=config.dropout,
        gated=gated,
    )


def additive_mask(keep: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """bool, True = may attend -> 0 where kept and the dtype's most negative value elsewhere (not -inf: a row with
    nothing to see becomes uniform instead of NaN)."""
    return torch.zeros(keep.shape, dtype=dtype, device=keep.device).masked_fill(~keep, torch.finfo(dtype).min)


class T5Stack(nn.Module):
    """The encoder (bidirectional bias, no cross-attention) or the decoder (``causal``: causal bias,
    cross-attention), ending in one more RMS norm. The model holds them as ``encoder_stack`` and ``decoder_stack``
    (``decoder`` is the generation entry point every backbone has, ``Backbone.decoder``)."""

    def __init__(self, config: T5Config, num_layers: int, causal: bool):
        super().__init__()
        self.causal = causal
        self.relative_bias = RelativePositionBias(
            config.num_heads,
            bidirectional=not causal,
            num_buckets=config.relative_attention_num_buckets,
            max_distance=config.relative_attention_max_distance,
        )
        self.layers = nn.ModuleList(t5_layer(config, causal) for _ in range(num_layers))
        self.final_layer_norm = nn.RMSNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None,
        context: torch.Tensor | None = None,
        context_mask: torch.Tensor | None = None,
        cache: list[LayerCache] | None = None,
        offset: int | None = None,
    ) -> torch.Tensor:
        """x (B, T, H) embedded inputs; ``mask`` (B, T) 1 = token or None (no padding). With a cache the new
        queries sit after the cached keys: at ``offset``, by default the number of keys cached so far."""
        if offset is None:
            offset = cache[0].self_attention.length if cache else 0
        keys = offset + x.shape[1]
        # Every layer's self-attention scores get this one additive term: the relative bias of the stack, with
        # causality and padding folded in once rather than in every layer.
        bias = self.relative_bias(x.shape[1], keys, query_offset=offset).to(x.dtype)  # (1, nh, T, K)
        if self.causal:
            bias = bias.masked_fill(~causal_mask(x.shape[1], keys, x.device), torch.finfo(x.dtype).min)
        if mask is not None:
            bias = bias + additive_mask(mask.bool()[:, None, None, :], x.dtype)  # (B, nh, T, K)
        x = self.dropout(x)
        for i, layer in enumerate(self.layers):
            x = layer(x, bias, context=context, context_mask=context_mask, cache=cache[i] if cache else None)
        return self.dropout(self.final_layer_norm(x))


@MODELS.register("t5", T5Config)
class T5(Backbone):
    capabilities = frozenset({ENCODER_DECODER})
    text_template = "A </s>"
    fields_at_least_one = frozenset(
        {"num_decoder_layers", "relative_attention_num_buckets", "relative_attention_max_distance"}
    )
    fields_above_zero = frozenset({"initializer_factor"})

    def __init__(self, config: T5Config):
        super().__init__()
        self.check_config(config)
        check_vocab_size(config)
        self.config = config
        self.shared = nn.Embedding(config.vocab_size, config.hidden_size)
        self.encoder_stack = T5Stack(config, config.num_layers, causal=False)
        self.decoder_stack = T5Stack(config, config.num_decoder_layers or config.num_layers, causal=True)
        self.lm_head = None
        if not config.tie_word_embeddings:
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.reset_parameters()

    @classmethod
    def check_config(cls, config: T5Config) -> None:
        if config.num_decoder_layers is not None and config.num_decoder_layers < 1:
            raise ConfigError(f"model.num_decoder_layers={config.num_decoder_layers}: must be positive or null")
        if not 0 < config.relative_attention_num_buckets // 2 < config.relative_attention_max_distance:
            raise ConfigError(
                f"model.relative_attention_num_buckets={config.relative_attention_num_buckets} and "
                f"model.relative_attention_max_distance={config.relative_attention_max_distance}: expected at least "
                "2 buckets and a maximum distance above half of them"
            )

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Mesh TensorFlow's initialisation (as transformers' T5 applies it): unit-variance embeddings, and every
        projection scaled by its fan-in, the query's also by d_kv^-0.5 in place of the score scaling."""
        c, factor = self.config, self.config.initializer_factor
        nn.init.normal_(self.shared.weight, std=factor)
        if self.lm_head is not None:
            nn.init.normal_(self.lm_head.weight, std=factor)
        for module in self.modules():
            if isinstance(module, MultiHeadAttention):
                nn.init.normal_(module.query.weight, std=factor * (c.hidden_size * c.head_size) ** -0.5)
                nn.init.normal_(module.key.weight, std=factor * c.hidden_size**-0.5)
                nn.init.normal_(module.value.weight, std=factor * c.hidden_size**-0.5)
                nn.init.normal_(module.output.weight, std=factor * (c.num_heads * c.head_size) ** -0.5)
            elif isinstance(module, FeedForward):
                for linear in (module.intermediate, module.intermediate_linear):
                    if linear is not None:
                        nn.init.normal_(linear.weight, std=factor * c.hidden_size**-0.5)
                nn.init.normal_(module.output.weight, std=factor * c.intermediate_size**-0.5)
            elif isinstance(module, RelativePositionBias):
                nn.init.normal_(module.relative_attention_bias.weight, std=factor * c.hidden_size**-0.5)
            elif isinstance(module, nn.RMSNorm):
                nn.init.constant_(module.weight, factor)

    @property
    def input_embeddings(self) -> nn.Embedding:
        return self.shared

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """(B, S) ids -> (B, S, H) encoder states; ``attention_mask`` (B, S) 1 = token, 0 = padding."""
        return self.encoder_stack(self.shared(input_ids), _padding(attention_mask))

    def decode(
        self,
        decoder_input_ids: torch.Tensor,
        encoder_hidden: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        cache: list[LayerCache] | None = None,
        offset: int | None = None,
    ) -> torch.Tensor:
        """(B, T) decoder ids (starting with the padding id) against the encoder states and their padding mask
        -> (B, T, H). With a ``cache`` (``new_cache()``, filled as it goes) only the ids after the cached ones
        need passing; ``offset`` is the position of the first (by default, the number of positions cached)."""
        embedded = self.shared(decoder_input_ids)
        return self.decoder_stack(embedded, None, encoder_hidden, _padding(attention_mask), cache, offset)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(..., H) decoder states -> (..., V) scores over the vocabulary."""
        weight, hidden = self.output_layer(hidden)
        return F.linear(hidden, weight)

    def output_layer(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The output layer's (V, H) weight and the states it reads: v1.1's own lm_head, or v1.0's tied embedding
        reading states rescaled by d_model^-0.5 (Mesh TensorFlow's tied output layer)."""
        if self.lm_head is not None:
            return self.lm_head.weight, hidden
        return self.shared.weight, hidden * self.config.hidden_size**-0.5

    def new_cache(self) -> list[LayerCache]:
        """An empty key/value cache for ``decode``: one per decoder layer."""
        return [LayerCache() for _ in self.decoder_stack.layers]

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
    ) -> Representations:
        """Decoder states (B, T, H) in ``hidden``; the encoder's (B, S, H) in ``extras["encoder_hidden"]``."""
        if decoder_input_ids is None:
            raise ValueError("T5 needs decoder_input_ids: the targets shifted right behind the padding id")
        # One lookup for both stacks: the tied embedding then gets one dense gradient instead of two.
        ids = torch.cat([input_ids.flatten(), decoder_input_ids.flatten()])
        embedded = self.shared(ids).split([input_ids.numel(), decoder_input_ids.numel()])
        source = embedded[0].view(*input_ids.shape, -1)  # (B, S, H)
        target = embedded[1].view(*decoder_input_ids.shape, -1)  # (B, T, H)
        mask = _padding(attention_mask)
        encoder_hidden = self.encoder_stack(source, mask)
        hidden = self.decoder_stack(target, None, encoder_hidden, mask)
        return Representations(hidden=hidden, extras={"encoder_hidden": encoder_hidden})


def _padding(attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """A padding mask, or None when every position is a token: full windows then skip the (B, nh, T, K) mask.
    A compiled step keeps the mask (the same result): asking whether it is all ones would stop the graph to read
    the answer back from the device."""
    if torch.compiler.is_compiling():
        return attention_mask
    if attention_mask is None or bool(attention_mask.all()):
        return None
    return attention_mask
