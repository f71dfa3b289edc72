"""BERT (Devlin et al. 2019, https://arxiv.org/abs/1810.04805): a post-LN Transformer encoder over token, position
and segment embeddings, with a tanh pooler over the first ([CLS]) position.

The same backbone serves the encoder family: RoBERTa is a preset of it (``type_vocab_size: 1``,
``position_offset: 2``, byte-level BPE, no NSP), ELECTRA's discriminator a subclass without a pooler
(``models/electra.py``), ALBERT a subclass with cross-layer sharing (``models/albert.py``). ``embedding_size``
below the model width factorizes the embedding (ALBERT section 3.1) and adds a projection E -> H.

Submodule names follow the released checkpoints closely (``embeddings.word_embeddings``,
``encoder.layers.{i}.attention.query``, ``pooler.dense``) so that ``interop/hf.py`` imports them with a plain name
table. The MLM and NSP heads belong to the objectives (``objectives/mlm.py``, ``objectives/nsp.py``).
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
    POOLER,
    SEGMENTS,
    Backbone,
    FamilyConfig,
    Representations,
    check_heads,
    check_vocab_size,
)
from plm_toolkit.nn.attention import padding_mask
from plm_toolkit.nn.embeddings import TokenEmbeddings
from plm_toolkit.nn.feed_forward import HiddenAct
from plm_toolkit.nn.init import init_weights
from plm_toolkit.nn.layers import TransformerLayer


@dataclass
class BertConfig(FamilyConfig):
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
    # Id of the padding token: its embedding row starts at zero and receives no gradient. The trainer sets it to
    # the tokenizer's padding id (RoBERTa's byte-level BPE puts <pad> at 1).
    pad_token_id: int = 0
    # Width E of the token/position/segment embeddings; null means hidden_size. A smaller E adds a linear
    # projection E -> H after the embedding LayerNorm (ALBERT's factorized embedding, ELECTRA-Small's 128).
    embedding_size: int | None = None
    # Added to every position id: RoBERTa numbers positions from padding_idx + 1 = 2, so its position table has
    # max_seq_len + 2 rows (514); 0 for BERT.
    position_offset: int = 0
    # Vocabulary that a trained tokenizer gets when data.tokenizer.kind=auto: wordpiece (BERT) or bpe (RoBERTa).
    tokenizer: TokenizerKind = TokenizerKind.wordpiece
    # Activation of the masked-LM head's transform; null = hidden_act (BERT's and ALBERT's heads). RoBERTa's and
    # ELECTRA's released heads use the exact gelu whatever hidden_act is, so their presets set gelu.
    head_act: HiddenAct | None = None


def encoder_layer(config: BertConfig) -> TransformerLayer:
    """BERT's post-LN encoder layer: each sub-block is ``LayerNorm(x + dropout(sublayer(x)))``."""
    return TransformerLayer(
        config.hidden_size,
        config.num_heads,
        config.intermediate_size,
        config.hidden_act,
        config.hidden_dropout,
        config.attention_dropout,
        config.layer_norm_eps,
    )


class BertEncoder(nn.Module):
    """A stack of ``num_layers`` post-LN encoder layers; ``layers`` may hold fewer distinct modules than that
    (ALBERT's sharing), layer i then applies ``layers[i % len(layers)]``."""

    def __init__(self, config: BertConfig, num_distinct: int | None = None):
        super().__init__()
        self.num_layers = config.num_layers
        self.layers = nn.ModuleList(encoder_layer(config) for _ in range(num_distinct or config.num_layers))

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None, all_hidden: list[torch.Tensor] | None
    ) -> torch.Tensor:
        for i in range(self.num_layers):
            x = self.layers[i % len(self.layers)](x, mask)
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


def embedding_width(config: BertConfig) -> int:
    return config.embedding_size or config.hidden_size


def build_embeddings(config: BertConfig, cls: type[TokenEmbeddings] = TokenEmbeddings, **extra) -> TokenEmbeddings:
    """The family's embeddings from its config; a subclass (``cls``) may take ``extra`` arguments (ERNIE)."""
    return cls(
        config.vocab_size,
        embedding_width(config),
        config.max_position_embeddings,
        config.type_vocab_size,
        config.layer_norm_eps,
        config.hidden_dropout,
        config.pad_token_id,
        config.position_offset,
        **extra,
    )


def build_projection(config: BertConfig) -> nn.Linear | None:
    """The E -> H projection of a factorized embedding, or None when E = H."""
    width = embedding_width(config)
    return nn.Linear(width, config.hidden_size) if width != config.hidden_size else None


@MODELS.register("bert", BertConfig)
class Bert(Backbone):
    capabilities = frozenset({BIDIRECTIONAL, SEGMENTS, POOLER})
    # RoBERTa is a BERT preset: its <s> stands where BERT's [CLS] does.
    summary_token = "[CLS] (or <s>)"
    # ELECTRA's discriminator has no pooler: its fine-tuning heads read the [CLS] state themselves.
    has_pooler = True

    def __init__(self, config: BertConfig):
        super().__init__()
        check_vocab_size(config)
        self.check_config(config)
        self.config = config
        self.embeddings = self.build_embeddings(config)
        self.embeddings_project = build_projection(config)
        self.encoder = self.build_encoder(config)
        self.pooler = BertPooler(config.hidden_size) if self.has_pooler else None
        self.apply(self._init_weights)

    @classmethod
    def check_config(cls, config: BertConfig) -> None:
        check_heads(config)
        if config.embedding_size is not None and config.embedding_size < 1:
            raise ConfigError(
                f"model.embedding_size={config.embedding_size}: must be positive, or null for model.hidden_size"
            )

    def build_embeddings(self, config: BertConfig) -> TokenEmbeddings:
        return build_embeddings(config)

    def build_encoder(self, config: BertConfig) -> nn.Module:
        return BertEncoder(config)

    def _init_weights(self, module: nn.Module) -> None:
        init_weights(module, self.config.initializer_range)

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
        **embedding_inputs: torch.Tensor,
    ) -> Representations:
        """(B, T) ids -> last hidden states (B, T, H) and the pooled [CLS] summary (B, H).

        ``attention_mask`` is 1 for tokens and 0 for padding; no position attends to padding. With
        ``output_all_hidden``, ``all_hidden`` holds the embedding output followed by every layer's output.
        ``embedding_inputs``: further per-token ids the family's embeddings take (ERNIE's ``task_type_ids``).
        """
        longest = self.max_length(self.config)
        if input_ids.shape[1] > longest:
            raise ValueError(
                f"sequence length {input_ids.shape[1]} exceeds model.max_position_embeddings "
                f"{self.config.max_position_embeddings} - model.position_offset {self.config.position_offset}"
            )
        x = self.embed(input_ids, token_type_ids, position_ids, **embedding_inputs)  # (B, T, H)
        all_hidden = [x] if output_all_hidden else None
        hidden = self.encoder(x, padding_mask(attention_mask), all_hidden)  # (B, T, H)
        pooled = self.pooler(hidden) if self.pooler is not None else None
        return Representations(hidden=hidden, pooled=pooled, all_hidden=all_hidden)

    def embed(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        **embedding_inputs: torch.Tensor,
    ) -> torch.Tensor:
        """(B, T) ids -> (B, T, H) encoder input: the embeddings, projected to H when they are narrower."""
        x = self.embeddings(input_ids, token_type_ids, position_ids, **embedding_inputs)  # (B, T, E)
        return x if self.embeddings_project is None else self.embeddings_project(x)  # (B, T, H)
