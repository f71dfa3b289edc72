"""T5 (Raffel et al. 2020, https://arxiv.org/abs/1910.10683): an encoder-decoder Transformer with pre-norm residual
blocks, RMS layer norm without bias or mean, no biases anywhere, and a relative position bias in place of position
embeddings (``nn/relative_bias.py``: 32 log-spaced buckets up to distance 128, bidirectional in the encoder, causal
in the decoder, one table per stack held by the first layer and shared by the others).

Attention scores are not divided by sqrt(d_head): the query projection's initialisation carries that factor
(Mesh TensorFlow's ``std = (d_model * d_kv) ** -0.5``). v1.0 ties the output layer to the shared embedding and
rescales the decoder output by d_model^-0.5 before it; v1.1 (``feed_forward: gated_gelu``, ``tie_word_embeddings:
false``) has a gated-GELU feed-forward, an untied output layer without the rescale, and no dropout in
pretraining.

Submodule names follow the released checkpoints where they can (``shared``, ``lm_head``, q/k/v/o, wi/wo); the
table in ``models/hf_t5.py`` maps the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from plm_toolkit.config.schema import TokenizerKind, choices
from plm_toolkit.errors import ConfigError
from plm_toolkit.models.base import ENCODER_DECODER, Backbone, Representations
from plm_toolkit.nn.relative_bias import RelativePositionBias
from plm_toolkit.registry import MODELS

# relu: T5 v1.0's DenseReluDense; gated_gelu: v1.1's GEGLU (Shazeer 2020) with the tanh approximation of GELU.
T5FeedForwardKind = choices("T5FeedForwardKind", "relu", "gated_gelu")


@dataclass
class T5Config:
    # Registry name of the family.
    name: str = "t5"
    # Rows of the shared token embedding; null takes the tokenizer's size (the released checkpoints pad theirs to
    # 32128 for 32100 tokens).
    vocab_size: int | None = None
    # Vocabulary that a trained tokenizer gets when data.tokenizer.kind=auto: a SentencePiece-style unigram LM
    # with T5's <pad> </s> <unk> and 100 sentinels.
    tokenizer: TokenizerKind = TokenizerKind.unigram
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


class RMSNorm(nn.Module):
    """T5's layer norm: x / sqrt(mean(x^2) + eps) * weight, without mean subtraction or bias (Zhang & Sennrich
    2019); the mean square is taken in fp32 so half-precision activations normalise like fp32 ones."""

    def __init__(self, hidden_size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps)).to(self.weight.dtype)


class T5FeedForward(nn.Module):
    """wo(dropout(act(wi x))) for v1.0; wo(dropout(gelu_tanh(wi_0 x) * wi_1 x)) for v1.1."""

    def __init__(self, hidden_size: int, intermediate_size: int, kind: str, dropout: float):
        super().__init__()
        self.gated = getattr(kind, "value", kind) == "gated_gelu"
        if self.gated:
            self.wi_0 = nn.Linear(hidden_size, intermediate_size, bias=False)
            self.wi_1 = nn.Linear(hidden_size, intermediate_size, bias=False)
        else:
            self.wi = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.wo = nn.Linear(intermediate_size, hidden_size, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inner = F.gelu(self.wi_0(x), approximate="tanh") * self.wi_1(x) if self.gated else F.relu(self.wi(x))
        return self.wo(self.dropout(inner))


class T5Attention(nn.Module):
    """Multi-head attention without biases or score scaling; ``bias`` is an additive (B|1, nh, T, K) score term
    holding the relative position bias and the masks. With a ``cache`` dict, self-attention appends this step's
    keys and values to the cached ones and cross-attention projects the encoder states once."""

    def __init__(self, hidden_size: int, num_heads: int, head_size: int, dropout: float):
        super().__init__()
        self.num_heads, self.head_size, self.dropout = num_heads, head_size, dropout
        inner = num_heads * head_size
        self.q = nn.Linear(hidden_size, inner, bias=False)
        self.k = nn.Linear(hidden_size, inner, bias=False)
        self.v = nn.Linear(hidden_size, inner, bias=False)
        self.o = nn.Linear(inner, hidden_size, bias=False)

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.num_heads, self.head_size).transpose(1, 2)  # (B, nh, L, hs)

    def forward(
        self,
        x: torch.Tensor,
        bias: torch.Tensor | None,
        memory: torch.Tensor | None = None,
        cache: dict | None = None,
    ) -> torch.Tensor:
        """x (B, T, H) attends to itself, or to ``memory`` (B, S, H) (cross-attention) -> (B, T, H)."""
        q = self.heads(self.q(x))  # (B, nh, T, hs)
        if memory is not None and cache is not None and "k" in cache:
            k, v = cache["k"], cache["v"]  # the encoder states' projections, computed at the first step
        else:
            source = x if memory is None else memory
            k, v = self.heads(self.k(source)), self.heads(self.v(source))  # (B, nh, K, hs)
            if cache is not None:
                if memory is None and "k" in cache:
                    k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
                cache["k"], cache["v"] = k, v
        context = F.scaled_dot_product_attention(
            q, k, v, attn_mask=bias, dropout_p=self.dropout if self.training else 0.0, scale=1.0
        )  # (B, nh, T, hs)
        batch, _, length, _ = context.shape
        return self.o(context.transpose(1, 2).reshape(batch, length, -1))  # (B, T, H)


class T5Layer(nn.Module):
    """One pre-norm block: x + dropout(attention(norm(x))), [x + dropout(cross(norm(x), encoder))],
    x + dropout(ff(norm(x)))."""

    def __init__(self, config: T5Config, cross_attention: bool):
        super().__init__()
        h, eps, p = config.hidden_size, config.layer_norm_eps, config.dropout
        self.self_attention_norm = RMSNorm(h, eps)
        self.self_attention = T5Attention(h, config.num_heads, config.head_size, p)
        if cross_attention:
            self.cross_attention_norm = RMSNorm(h, eps)
            self.cross_attention = T5Attention(h, config.num_heads, config.head_size, p)
        self.feed_forward_norm = RMSNorm(h, eps)
        self.feed_forward = T5FeedForward(h, config.intermediate_size, config.feed_forward, p)
        self.dropout = nn.Dropout(p)

    def forward(
        self,
        x: torch.Tensor,
        bias: torch.Tensor,
        memory: torch.Tensor | None = None,
        memory_bias: torch.Tensor | None = None,
        cache: dict | None = None,
    ) -> torch.Tensor:
        x = x + self.dropout(self.self_attention(self.self_attention_norm(x), bias, cache=_part(cache, "self")))
        if memory is not None:
            normed = self.cross_attention_norm(x)
            x = x + self.dropout(self.cross_attention(normed, memory_bias, memory, cache=_part(cache, "cross")))
        return x + self.dropout(self.feed_forward(self.feed_forward_norm(x)))


def _part(cache: dict | None, key: str) -> dict | None:
    return None if cache is None else cache.setdefault(key, {})


def additive_mask(keep: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """bool (..., K), True = may attend -> 0 where kept and the dtype's most negative value elsewhere (not -inf:
    a row with nothing to see becomes uniform instead of NaN)."""
    return torch.zeros(keep.shape, dtype=dtype, device=keep.device).masked_fill(~keep, torch.finfo(dtype).min)


class T5Stack(nn.Module):
    """The encoder (bidirectional bias, no cross-attention) or the decoder (causal bias, cross-attention)."""

    def __init__(self, config: T5Config, num_layers: int, decoder: bool):
        super().__init__()
        self.decoder = decoder
        self.relative_bias = RelativePositionBias(
            config.num_heads,
            bidirectional=not decoder,
            num_buckets=config.relative_attention_num_buckets,
            max_distance=config.relative_attention_max_distance,
        )
        self.layers = nn.ModuleList(T5Layer(config, cross_attention=decoder) for _ in range(num_layers))
        self.final_norm = RMSNorm(config.hidden_size, config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None,
        memory: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        cache: list[dict] | None = None,
        offset: int = 0,
    ) -> torch.Tensor:
        """x (B, T, H) embedded inputs; ``mask`` (B, T) 1 = token (encoder) or None; the decoder's queries sit at
        positions ``offset + [0, T)`` after ``offset`` cached ones."""
        length = x.shape[1]
        keys = offset + length
        # The bias of every layer's self-attention, with the masks folded in once for the whole stack.
        bias = self.relative_bias(length, keys, query_offset=offset).to(x.dtype)  # (1, nh, T, K)
        if self.decoder:
            future = torch.arange(keys, device=x.device)[None, :] > torch.arange(offset, keys, device=x.device)[:, None]
            bias = bias.masked_fill(future, torch.finfo(x.dtype).min)
        if mask is not None:
            bias = bias + additive_mask(mask.bool()[:, None, None, :], x.dtype)  # (B, nh, T, K)
        memory_bias = None if memory_mask is None else additive_mask(memory_mask.bool()[:, None, None, :], x.dtype)
        x = self.dropout(x)
        for i, layer in enumerate(self.layers):
            x = layer(x, bias, memory, memory_bias, cache=None if cache is None else cache[i])
        return self.dropout(self.final_norm(x))


@MODELS.register("t5", T5Config, paper_objective="span_corruption")
class T5(Backbone):
    capabilities = frozenset({ENCODER_DECODER})

    def __init__(self, config: T5Config):
        super().__init__()
        self.check(config)
        self.config = config
        self.shared = nn.Embedding(config.vocab_size, config.hidden_size)
        self.encoder = T5Stack(config, config.num_layers, decoder=False)
        self.decoder = T5Stack(config, config.num_decoder_layers or config.num_layers, decoder=True)
        self.lm_head = None
        if not config.tie_word_embeddings:
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.reset_parameters()

    @staticmethod
    def check(config: T5Config) -> None:
        if config.vocab_size is None:
            raise ConfigError("model.vocab_size is null; set it or let the trainer take it from the tokenizer")
        if config.num_decoder_layers is not None and config.num_decoder_layers < 1:
            raise ConfigError(f"model.num_decoder_layers={config.num_decoder_layers}: must be positive or null")

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Mesh TensorFlow's initialisation (as transformers' T5 applies it): unit-variance embeddings, and every
        projection scaled by its fan-in, the query's also by d_kv^-0.5 in place of the score scaling."""
        c, factor = self.config, self.config.initializer_factor
        nn.init.normal_(self.shared.weight, std=factor)
        if self.lm_head is not None:
            nn.init.normal_(self.lm_head.weight, std=factor)
        inner = c.num_heads * c.head_size
        for module in self.modules():
            if isinstance(module, T5Attention):
                nn.init.normal_(module.q.weight, std=factor * (c.hidden_size * c.head_size) ** -0.5)
                nn.init.normal_(module.k.weight, std=factor * c.hidden_size**-0.5)
                nn.init.normal_(module.v.weight, std=factor * c.hidden_size**-0.5)
                nn.init.normal_(module.o.weight, std=factor * inner**-0.5)
            elif isinstance(module, T5FeedForward):
                for name in ("wi", "wi_0", "wi_1"):
                    if hasattr(module, name):
                        nn.init.normal_(getattr(module, name).weight, std=factor * c.hidden_size**-0.5)
                nn.init.normal_(module.wo.weight, std=factor * c.intermediate_size**-0.5)
            elif isinstance(module, RelativePositionBias):
                nn.init.normal_(module.relative_attention_bias.weight, std=factor * c.hidden_size**-0.5)
            elif isinstance(module, RMSNorm):
                nn.init.constant_(module.weight, factor)

    @property
    def input_embeddings(self) -> nn.Embedding:
        return self.shared

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """(B, S) ids -> (B, S, H) encoder states."""
        return self.encoder(self.shared(input_ids), attention_mask)

    def decode(
        self,
        decoder_input_ids: torch.Tensor,
        encoder_hidden: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        cache: list[dict] | None = None,
        offset: int = 0,
    ) -> torch.Tensor:
        """(B, T) decoder ids (starting with the padding id) against the encoder states -> (B, T, H). With a
        ``cache`` (one dict per layer, empty at the first step) only the new ids need passing, at ``offset``."""
        return self.decoder(self.shared(decoder_input_ids), None, encoder_hidden, attention_mask, cache, offset)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(..., H) decoder states -> (..., V) scores over the vocabulary."""
        if self.lm_head is not None:
            return self.lm_head(hidden)
        # v1.0: the tied embedding reads states rescaled by d_model^-0.5 (Mesh TensorFlow's tied output layer).
        return F.linear(hidden * self.config.hidden_size**-0.5, self.shared.weight)

    def new_cache(self) -> list[dict]:
        return [{} for _ in self.decoder.layers]

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
    ) -> Representations:
        """Decoder states (B, T, H) in ``hidden``; the encoder's (B, S, H) in ``extras["encoder_hidden"]``."""
        if decoder_input_ids is None:
            raise ValueError("T5 needs decoder_input_ids: the targets shifted right behind the padding id")
        encoder_hidden = self.encode(input_ids, attention_mask)
        hidden = self.decode(decoder_input_ids, encoder_hidden, attention_mask)
        return Representations(hidden=hidden, extras={"encoder_hidden": encoder_hidden})
