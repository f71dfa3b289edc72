"""GPT (Radford et al. 2018, "Improving Language Understanding by Generative Pre-Training") and GPT-2 (Radford et
al. 2019, "Language Models are Unsupervised Multitask Learners"): a Transformer decoder without cross-attention, over
learned absolute positions, trained as a causal language model (objective ``clm``) with the output layer tied to the
token embedding.

The two differ only in where the LayerNorms sit and in the initialization:

- GPT: post-LN layers (``LN(x + sublayer(x))``, as BERT), no LayerNorm after the last layer, 512 positions;
- GPT-2 (section 2.3): pre-LN layers (``x + sublayer(LN(x))``), a final LayerNorm, 1024 positions, and the
  residual projections (attention output, second feed-forward matrix) initialised with std 0.02 / sqrt(2 n_layer),
  "to account for the accumulation on the residual path with model depth".

Both use the tanh approximation of GELU (their code's ``gelu``) and dropout on the embeddings, the attention
probabilities and each residual branch. Submodule names are the shared ones (``embeddings.word_embeddings``,
``layers.{i}.attention.query``, ...); ``interop/hf_gpt.py`` maps them onto transformers' ``OpenAIGPTLMHeadModel`` and
``GPT2LMHeadModel`` (whose Conv1D weights are stored transposed, q, k and v as one matrix).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from plm_toolkit.core.data_schema import TokenizerKind
from plm_toolkit.core.errors import ConfigError
from plm_toolkit.core.registry import MODELS
from plm_toolkit.generation.decoding import CachedDecoder
from plm_toolkit.models.base import CAUSAL, Backbone, FamilyConfig, Representations, check_vocab_size
from plm_toolkit.nn.embeddings import TokenEmbeddings
from plm_toolkit.nn.feed_forward import HiddenAct
from plm_toolkit.nn.init import init_weights
from plm_toolkit.nn.layers import LayerCache, TransformerLayer
from plm_toolkit.nn.positions import position_ids as positions_of


@dataclass
class GPTConfig(FamilyConfig):
    # Registry name of the family: gpt (GPT-1) or gpt2.
    name: str = "gpt"
    # Rows of the token embedding; null takes the tokenizer's size (the trainer fills it in before building).
    vocab_size: int | None = None
    # Width of every layer's input and output (n_embd).
    hidden_size: int = 768
    # Number of layers (n_layer).
    num_layers: int = 12
    # Attention heads per layer (n_head); hidden_size must be a multiple of it.
    num_heads: int = 12
    # Inner width of the feed-forward block (4 x hidden_size in both papers).
    intermediate_size: int = 3072
    # Feed-forward activation: gelu_tanh is both papers' GELU (the tanh approximation).
    hidden_act: HiddenAct = HiddenAct.gelu_tanh
    # Dropout on each residual branch (resid_pdrop).
    hidden_dropout: float = 0.1
    # Dropout on the attention probabilities (attn_pdrop).
    attention_dropout: float = 0.1
    # Dropout on the summed token and position embeddings (embd_pdrop).
    embedding_dropout: float = 0.1
    # Rows of the learned position table: the longest sequence the model accepts (GPT: 512, GPT-2: 1024).
    max_position_embeddings: int = 512
    # Epsilon of every LayerNorm.
    layer_norm_eps: float = 1e-5
    # Standard deviation of the normal initialization of weight matrices and embeddings.
    initializer_range: float = 0.02
    # LayerNorm before each sub-block (GPT-2) instead of after the residual sum (GPT).
    pre_norm: bool = False
    # A LayerNorm after the last layer (GPT-2's ln_f).
    final_layer_norm: bool = False
    # Initialise the residual projections with initializer_range / sqrt(2 num_layers) (GPT-2 section 2.3).
    scaled_residual_init: bool = False
    # Vocabulary that a trained tokenizer gets when data.tokenizer.kind=auto: GPT-2's byte-level BPE with
    # <|endoftext|> (GPT-1 used a character-level BPE of 40,000 merges; the byte-level one needs no unknown token).
    tokenizer: TokenizerKind = TokenizerKind.gpt2_bpe


@dataclass
class GPT2Config(GPTConfig):
    # Registry name of the family.
    name: str = "gpt2"
    # Rows of the learned position table (GPT-2: 1024).
    max_position_embeddings: int = 1024
    # LayerNorm before each sub-block (GPT-2).
    pre_norm: bool = True
    # A LayerNorm after the last layer (GPT-2's ln_f).
    final_layer_norm: bool = True
    # Initialise the residual projections with initializer_range / sqrt(2 num_layers) (GPT-2 section 2.3).
    scaled_residual_init: bool = True


@MODELS.register("gpt", GPTConfig)
@MODELS.register("gpt2", GPT2Config)
class GPT(Backbone):
    capabilities = frozenset({CAUSAL})
    # A causal model has seen the whole sequence only at its last token: sentence-level heads read it there.
    summary_position = "last"
    text_template = "A <|endoftext|>"
    lm_head_bias = False

    def __init__(self, config: GPTConfig):
        super().__init__()
        check_vocab_size(config)
        self.check_config(config)
        self.config = config
        self.embeddings = TokenEmbeddings(
            config.vocab_size,
            config.hidden_size,
            config.max_position_embeddings,
            type_vocab_size=0,
            layer_norm_eps=None,
            dropout=config.embedding_dropout,
        )
        self.layers = nn.ModuleList(
            TransformerLayer(
                config.hidden_size,
                config.num_heads,
                config.intermediate_size,
                config.hidden_act,
                config.hidden_dropout,
                config.attention_dropout,
                config.layer_norm_eps,
                pre_norm=config.pre_norm,
            )
            for _ in range(config.num_layers)
        )
        eps = config.layer_norm_eps
        self.final_layer_norm = nn.LayerNorm(config.hidden_size, eps=eps) if config.final_layer_norm else None
        self.apply(self._init_weights)
        if config.scaled_residual_init:
            std = config.initializer_range / math.sqrt(2 * config.num_layers)
            for layer in self.layers:
                nn.init.normal_(layer.attention.output.weight, mean=0.0, std=std)
                nn.init.normal_(layer.feed_forward.output.weight, mean=0.0, std=std)

    @classmethod
    def check_config(cls, config: GPTConfig) -> None:
        super().check_config(config)
        if config.pre_norm != config.final_layer_norm:
            raise ConfigError(
                f"model.pre_norm={config.pre_norm} with model.final_layer_norm={config.final_layer_norm}: a pre-LN "
                "stack needs the final LayerNorm (GPT-2) and a post-LN one has none (GPT); set both alike"
            )

    def _init_weights(self, module: nn.Module) -> None:
        init_weights(module, self.config.initializer_range)

    @property
    def input_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings

    def decoder(self, head) -> CachedDecoder:
        """Generation over a key/value cache (``plm_toolkit/generation/decoding.py``); ``head`` maps (B, H) to (B,
        V)."""
        return CachedDecoder(self, head)

    def new_cache(self) -> list[LayerCache]:
        """An empty key/value cache, one entry per layer, for ``forward(..., cache=...)``."""
        return [LayerCache() for _ in self.layers]

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        cache: list[LayerCache] | None = None,
        output_all_hidden: bool = False,
        **_: torch.Tensor,
    ) -> Representations:
        """(B, T) ids -> (B, T, H) hidden states; position t sees positions <= t only.

        ``attention_mask`` (B, K) is 1 for tokens and 0 for padding over every key: the cached ones, then these T.
        With a ``cache`` (``new_cache()``), each layer appends this call's keys and values and attends to all of
        them, so decoding feeds one token per call. Positions default to the cached length onwards; left-padded
        rows (batched generation) pass ``position_ids`` so their first real token is position 0.
        """
        past = cache[0].self_attention.length if cache else 0
        length = input_ids.shape[1]
        if past + length > self.config.max_position_embeddings:
            raise ValueError(
                f"{past + length} positions exceed model.max_position_embeddings={self.config.max_position_embeddings}"
            )
        if position_ids is None and past:
            if attention_mask is not None:
                position_ids = positions_of(attention_mask, past)  # (B, T)
            else:
                position_ids = torch.arange(past, past + length, device=input_ids.device)[None]  # (1, T)
        x = self.embeddings(input_ids, position_ids=position_ids)  # (B, T, H)
        all_hidden = [x] if output_all_hidden else None
        for i, layer in enumerate(self.layers):
            x = layer(x, attention_mask, is_causal=True, cache=cache[i] if cache else None)
            if all_hidden is not None:
                all_hidden.append(x)
        if self.final_layer_norm is not None:
            x = self.final_layer_norm(x)
        return Representations(hidden=x, all_hidden=all_hidden, cache=cache)
