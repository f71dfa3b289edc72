"""The Transformer of Vaswani et al. (2017, https://arxiv.org/abs/1706.03762): an encoder-decoder for translation.

What the paper specifies, and where it is here:
- sinusoidal positions (section 3.5), added to token embeddings scaled by sqrt(d_model) (section 3.4), with dropout
  on the sum (section 5.4). The table is [sin | cos] halves as in the authors' tensor2tensor code (the paper
  interleaves them; a model trained from scratch does not care which);
- one embedding matrix shared by the source, the target and the pre-softmax projection over a joint vocabulary
  (section 3.4; ``share_embeddings=false`` gives each its own);
- post-LN layers as in the paper, ``LayerNorm(x + Dropout(Sublayer(x)))``, or pre-LN with a final LayerNorm per
  stack (``pre_ln=true``); residual dropout 0.1 (base) and no dropout on attention weights (section 5.4);
- ReLU feed-forward of inner width d_ff (section 3.3).
Label smoothing (0.1) belongs to the ``translation`` objective, Adam with the Noam schedule to ``optimizer=
adam_noam``, checkpoint averaging to ``plm-average``, beam search to ``plm_toolkit/generation/decoding.py``.

Interface of an encoder-decoder backbone (what the objective, the tasks and generation call):
``encode(input_ids, attention_mask) -> (B, S, H)``, ``decode(decoder_input_ids, encoder_hidden, attention_mask,
cache) -> (B, T, H)``, ``logits(hidden) -> (..., V)``, ``decoder_start_token_id``; ``forward`` runs both
stacks for teacher forcing and returns the decoder's states (``extras["encoder_hidden"]`` the encoder's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from plm_toolkit.core.data_schema import TokenizerKind
from plm_toolkit.core.errors import ConfigError
from plm_toolkit.core.registry import MODELS
from plm_toolkit.models.base import (
    ENCODER_DECODER,
    Backbone,
    FamilyConfig,
    Representations,
    check_heads,
    check_vocab_size,
)
from plm_toolkit.nn.feed_forward import HiddenAct
from plm_toolkit.nn.layers import LayerCache, TransformerLayer
from plm_toolkit.nn.positions import sinusoid_embedding


@dataclass
class TransformerConfig(FamilyConfig):
    # Registry name of the family.
    name: str = "transformer"
    # Rows of the joint source-target vocabulary; null takes the tokenizer's size (the trainer fills it in).
    vocab_size: int | None = None
    # d_model: width of embeddings and of every layer's input and output.
    hidden_size: int = 512
    # Encoder layers (N = 6 in the paper).
    num_layers: int = 6
    # Decoder layers; null = num_layers.
    num_decoder_layers: int | None = None
    # Attention heads per layer (h = 8 base, 16 big); hidden_size must be a multiple of it.
    num_heads: int = 8
    # d_ff: inner width of the feed-forward block (2048 base, 4096 big).
    intermediate_size: int = 2048
    # Feed-forward activation (the paper: relu).
    hidden_act: HiddenAct = HiddenAct.relu
    # P_drop: dropout on each sub-block's output before the residual sum and on embeddings + positions
    # (0.1 base, 0.3 big for EN-DE).
    hidden_dropout: float = 0.1
    # Dropout on attention probabilities (not in the paper: 0).
    attention_dropout: float = 0.0
    # Rows of the sinusoidal position table: the longest source or target sentence in tokens.
    max_position_embeddings: int = 1024
    # Epsilon of every LayerNorm (tensor2tensor: 1e-6).
    layer_norm_eps: float = 1e-6
    # LayerNorm before each sub-block (pre-LN, with a final LayerNorm per stack) instead of after the residual sum
    # (post-LN, the paper's).
    pre_ln: bool = False
    # One embedding matrix for source tokens, target tokens and the output projection (section 3.4); false gives
    # each its own matrix (e.g. for languages with separate vocabularies).
    share_embeddings: bool = True
    # Multiply embeddings by sqrt(hidden_size) before adding positions (section 3.4).
    scale_embeddings: bool = True
    # Padding token: its embedding row is zero and receives no gradient. Set from the tokenizer by the trainer.
    pad_token_id: int = 1
    # First decoder input when generating and when shifting targets right (<s>). Set from the tokenizer.
    bos_token_id: int = 0
    # End of a sentence: decoding stops there (</s>). Set from the tokenizer.
    eos_token_id: int = 2
    # Vocabulary a trained tokenizer gets with data.tokenizer.kind=auto: byte-level BPE over both languages.
    tokenizer: TokenizerKind = TokenizerKind.bpe


def layer_stack(config: TransformerConfig, count: int, cross_attention: bool) -> nn.ModuleList:
    return nn.ModuleList(
        TransformerLayer(
            config.hidden_size,
            config.num_heads,
            config.intermediate_size,
            config.hidden_act,
            config.hidden_dropout,
            config.attention_dropout,
            config.layer_norm_eps,
            pre_norm=config.pre_ln,
            cross_attention=cross_attention,
        )
        for _ in range(count)
    )


@MODELS.register("transformer", TransformerConfig)
class Transformer(Backbone):
    capabilities = frozenset({ENCODER_DECODER})
    text_template = "<s> A </s>"
    fields_at_least_one = frozenset({"num_decoder_layers"})

    def __init__(self, config: TransformerConfig):
        super().__init__()
        check_vocab_size(config)
        self.check_config(config)
        self.config = config
        hidden, vocab = config.hidden_size, config.vocab_size
        self.shared = nn.Embedding(vocab, hidden, padding_idx=config.pad_token_id)
        self.decoder_embeddings = None if config.share_embeddings else nn.Embedding(vocab, hidden, config.pad_token_id)
        self.output_projection = None if config.share_embeddings else nn.Linear(hidden, vocab, bias=False)
        # Not a parameter and not saved: recomputed from the config (section 3.5).
        positions = torch.arange(config.max_position_embeddings)
        self.register_buffer("positions", sinusoid_embedding(positions, hidden), persistent=False)
        self.embed_scale = math.sqrt(hidden) if config.scale_embeddings else 1.0
        self.dropout = nn.Dropout(config.hidden_dropout)
        self.encoder_layers = layer_stack(config, config.num_layers, cross_attention=False)
        self.decoder_layers = layer_stack(config, config.num_decoder_layers or config.num_layers, cross_attention=True)
        eps = config.layer_norm_eps
        self.encoder_norm = nn.LayerNorm(hidden, eps=eps) if config.pre_ln else None
        self.decoder_norm = nn.LayerNorm(hidden, eps=eps) if config.pre_ln else None
        self.reset_parameters()

    @classmethod
    def check_config(cls, config: TransformerConfig) -> None:
        check_heads(config)
        if config.hidden_size % 2:
            raise ConfigError(f"model.hidden_size={config.hidden_size}: sinusoidal positions need an even width")

    def reset_parameters(self) -> None:
        """Xavier-uniform matrices and zero biases (tensor2tensor's and fairseq's init for this model); embeddings
        normal(0, d_model^-0.5), so that scaled by sqrt(d_model) they have unit variance like the positions."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, mean=0.0, std=self.config.hidden_size**-0.5)
                with torch.no_grad():
                    module.weight[self.config.pad_token_id].zero_()

    @property
    def input_embeddings(self) -> nn.Embedding:
        return self.shared

    @property
    def decoder_start_token_id(self) -> int:
        """The Transformer starts decoding from <s> (T5 and Hugging Face's encoder-decoders from padding)."""
        return self.config.bos_token_id

    def embed(self, ids: torch.Tensor, table: nn.Embedding, offset: int = 0) -> torch.Tensor:
        """(B, T) ids -> (B, T, H): scaled token embeddings plus the positions offset .. offset + T - 1, dropped out."""
        length = ids.shape[1]
        if offset + length > self.config.max_position_embeddings:
            raise ValueError(
                f"sequence length {offset + length} exceeds model.max_position_embeddings "
                f"{self.config.max_position_embeddings}"
            )
        x = table(ids) * self.embed_scale + self.positions[offset : offset + length].to(table.weight.dtype)
        return self.dropout(x)  # (B, T, H)

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """(B, S) source ids -> (B, S, H) encoder states; ``attention_mask`` 1 on tokens, 0 on padding."""
        x = self.embed(input_ids, self.shared)
        for layer in self.encoder_layers:
            x = layer(x, attention_mask)
        return x if self.encoder_norm is None else self.encoder_norm(x)

    def decode(
        self,
        decoder_input_ids: torch.Tensor,
        encoder_hidden: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        cache: list[LayerCache] | None = None,
        offset: int | None = None,
    ) -> torch.Tensor:
        """(B, T) decoder inputs over (B, S, H) encoder states (``attention_mask`` 1 on source tokens) -> (B, T, H).
        With ``cache`` (``new_cache()``, empty at the first call) each call continues the earlier ones: its first
        position is ``offset``, by default the number of positions decoded before."""
        if offset is None:
            offset = cache[0].self_attention.length if cache else 0
        table = self.shared if self.decoder_embeddings is None else self.decoder_embeddings
        x = self.embed(decoder_input_ids, table, offset)
        for i, layer in enumerate(self.decoder_layers):
            layer_cache = cache[i] if cache is not None else None
            x = layer(x, is_causal=True, context=encoder_hidden, context_mask=attention_mask, cache=layer_cache)
        return x if self.decoder_norm is None else self.decoder_norm(x)

    def new_cache(self) -> list[LayerCache]:
        """An empty key/value cache for ``decode``: one per decoder layer."""
        return [LayerCache() for _ in self.decoder_layers]

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(..., H) decoder states -> (..., V) scores over the vocabulary (the shared embedding as the pre-softmax
        projection, section 3.4)."""
        if self.output_projection is not None:
            return self.output_projection(hidden)
        return F.linear(hidden, self.shared.weight)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
    ) -> Representations:
        """Teacher forcing: (B, S) source and (B, T) decoder inputs -> the decoder's (B, T, H) states in ``hidden``
        and the encoder's in ``extras["encoder_hidden"]``."""
        if decoder_input_ids is None:
            raise ValueError("the Transformer's forward needs decoder_input_ids (the targets shifted right)")
        encoder_hidden = self.encode(input_ids, attention_mask)
        hidden = self.decode(decoder_input_ids, encoder_hidden, attention_mask)
        return Representations(hidden=hidden, extras={"encoder_hidden": encoder_hidden})
