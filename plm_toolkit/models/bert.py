"""BERT (Devlin et al. 2019, https://arxiv.org/abs/1810.04805): a post-LN Transformer encoder over token, position
and segment embeddings, with a tanh pooler over the first ([CLS]) position.

Submodule names follow the released checkpoints closely (``embeddings.word_embeddings``,
``encoder.layers.{i}.attention.query``, ``pooler.dense``) so that ``models/hf.py`` imports them with a plain name
table. The MLM and NSP heads belong to the objectives (``objectives/mlm.py``, ``objectives/nsp.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from plm_toolkit.errors import ConfigError
from plm_toolkit.models.base import BIDIRECTIONAL, POOLER, SEGMENTS, Backbone, Representations
from plm_toolkit.nn.attention import padding_mask
from plm_toolkit.nn.embeddings import TokenEmbeddings
from plm_toolkit.nn.feed_forward import HiddenAct, PostLNEncoderLayer
from plm_toolkit.registry import MODELS


@dataclass
class BertConfig:
    # Registry name of the family.
    name: str = "bert"
    # Rows of the token embedding; null takes the tokenizer's size (the trainer fills it in before building).
    vocab_size: int | None = None
    # Width of every layer's input and output (H).
    hidden_size: int = 768
    # Number of encoder layers (L).
    num_layers: int = 12
    # Attention heads per layer (A); hidden_size must be a multiple of it.
    num_heads: int = 12
    # Inner width of the feed-forward block (4H in the paper).
    intermediate_size: int = 3072
    # Feed-forward activation: gelu is the exact erf GELU of the released BERT; gelu_tanh its tanh approximation.
    hidden_act: HiddenAct = HiddenAct.gelu
    # Dropout on embeddings and on each sub-block's output before the residual sum.
    hidden_dropout: float = 0.1
    # Dropout on the attention probabilities.
    attention_dropout: float = 0.1
    # Rows of the learned position table: the longest sequence the model accepts.
    max_position_embeddings: int = 512
    # Number of segments (sentence A / B) that token_type_ids may name.
    type_vocab_size: int = 2
    # Epsilon of every LayerNorm (1e-12 as in the released TensorFlow code).
    layer_norm_eps: float = 1e-12
    # Standard deviation of the normal initialization of weight matrices and embeddings.
    initializer_range: float = 0.02
    # Id of the padding token: its embedding row starts at zero and receives no gradient.
    pad_token_id: int = 0


class BertEncoder(nn.Module):
    """A stack of post-LN encoder layers."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.layers = nn.ModuleList(
            PostLNEncoderLayer(
                config.hidden_size,
                config.num_heads,
                config.intermediate_size,
                config.hidden_act,
                config.hidden_dropout,
                config.attention_dropout,
                config.layer_norm_eps,
            )
            for _ in range(config.num_layers)
        )

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None, all_hidden: list[torch.Tensor] | None
    ) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, mask)
            if all_hidden is not None:
                all_hidden.append(x)
        return x


class BertPooler(nn.Module):
    """tanh(dense(h_[CLS])): the sequence summary NSP and sentence classification read (paper, section 3)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))  # (B, H)


@MODELS.register("bert", BertConfig, paper_objective="mlm_nsp")
class Bert(Backbone):
    capabilities = frozenset({BIDIRECTIONAL, SEGMENTS, POOLER})

    def __init__(self, config: BertConfig):
        super().__init__()
        if config.vocab_size is None:
            raise ConfigError("model.vocab_size is null; set it or let the trainer take it from the tokenizer")
        if config.hidden_size % config.num_heads != 0:
            raise ConfigError(
                f"model.hidden_size {config.hidden_size} is not a multiple of model.num_heads {config.num_heads}"
            )
        self.config = config
        self.embeddings = TokenEmbeddings(
            config.vocab_size,
            config.hidden_size,
            config.max_position_embeddings,
            config.type_vocab_size,
            config.layer_norm_eps,
            config.hidden_dropout,
            config.pad_token_id,
        )
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config.hidden_size)
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        # BERT's init: normal(0, initializer_range) weights (the TensorFlow release truncates at 2 std, Hugging
        # Face does not), zero biases, LayerNorm 1 / 0; the padding row starts at zero.
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.padding_idx is not None:
                with torch.no_grad():
                    module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    @property
    def input_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        output_all_hidden: bool = False,
    ) -> Representations:
        """(B, T) ids -> last hidden states (B, T, H) and the pooled [CLS] summary (B, H).

        ``attention_mask`` is 1 for tokens and 0 for padding; no position attends to padding. With
        ``output_all_hidden``, ``all_hidden`` holds the embedding output followed by every layer's output.
        """
        length = input_ids.shape[1]
        if length > self.config.max_position_embeddings:
            raise ValueError(
                f"sequence length {length} exceeds model.max_position_embeddings {self.config.max_position_embeddings}"
            )
        x = self.embeddings(input_ids, token_type_ids, position_ids)  # (B, T, H)
        all_hidden = [x] if output_all_hidden else None
        hidden = self.encoder(x, padding_mask(attention_mask), all_hidden)  # (B, T, H)
        return Representations(hidden=hidden, pooled=self.pooler(hidden), all_hidden=all_hidden)
