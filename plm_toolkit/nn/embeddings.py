"""Input embeddings: token + learned absolute position (+ segment) vectors, then LayerNorm and dropout."""

from __future__ import annotations

import torch
from torch import nn


class TokenEmbeddings(nn.Module):
    """BERT's input representation (Devlin et al. 2019, section 3, figure 2): the sum of a token, a position and
    a segment embedding.

    ``type_vocab_size=0`` drops the segment table (GPT, RoBERTa keep one of size 1); ``layer_norm_eps=None`` drops
    the LayerNorm (GPT-2 normalizes inside its layers). ``embedding_size`` may differ from the model width (ALBERT
    factorizes the embedding; the projection to the model width belongs to the backbone).

    ``position_offset`` shifts every position id: RoBERTa's released checkpoints number positions from
    ``padding_idx + 1`` (fairseq's convention), so their tables have ``max_seq_len + 2`` rows and rows 0 and 1 unused.
    """

    def __init__(
        self,
        vocab_size: int,
        embedding_size: int,
        max_position_embeddings: int,
        type_vocab_size: int = 2,
        layer_norm_eps: float | None = 1e-12,
        dropout: float = 0.1,
        pad_token_id: int | None = None,
        position_offset: int = 0,
    ):
        super().__init__()
        self.position_offset = position_offset
        self.word_embeddings = nn.Embedding(vocab_size, embedding_size, padding_idx=pad_token_id)
        self.position_embeddings = nn.Embedding(max_position_embeddings, embedding_size)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, embedding_size) if type_vocab_size else None
        self.layer_norm = nn.LayerNorm(embedding_size, eps=layer_norm_eps) if layer_norm_eps is not None else None
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        extra: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """(B, T) ids -> (B, T, E). Positions default to 0..T-1 (plus the offset) and segments to 0 (sentence A);
        given ``position_ids`` count from 0 too, the offset is added here. ``extra`` (broadcastable to (B, T, E))
        joins the sum before the LayerNorm (ERNIE's task-type embedding)."""
        x = self.word_embeddings(input_ids)  # (B, T, E)
        offset = self.position_offset
        if position_ids is None:
            # (T, E) broadcasts over the batch; a slice of the table avoids a gather.
            x = x + self.position_embeddings.weight[offset : offset + input_ids.shape[1]]
        else:
            x = x + self.position_embeddings(position_ids + offset)
        if self.token_type_embeddings is not None:
            if token_type_ids is None:
                x = x + self.token_type_embeddings.weight[0]
            else:
                x = x + self.token_type_embeddings(token_type_ids)
        if extra is not None:
            x = x + extra
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        return self.dropout(x)
