"""ERNIE (Sun et al. 2019, https://arxiv.org/abs/1904.09223; ERNIE 2.0/3.0 after it): BERT's backbone, with an
optional task-type embedding added to the input as transformers' ``ErnieModel`` has it (``use_task_id``,
``task_type_vocab_size``; ERNIE 2.0 tells its continual pretraining tasks apart by it, ERNIE 3.0 keeps the table).

What makes ERNIE 1.0 itself is its data and objective, not its layers: knowledge masking of whole words, phrases
and entities in stages (``objectives/knowledge_masking.py``), the paper objective of every preset here. The
backbone is a ``Bert`` subclass whose embeddings add the task table; without ``use_task_id`` it is BERT exactly.

Presets (``configs/model/ernie_*.yaml``) follow the released configs as PaddleNLP lists them and as the converted
``ErnieModel`` checkpoints carry them: ERNIE 1.0 base (ReLU, 513 positions, 2 segments), ERNIE 2.0 base (GELU,
4 segments) and ERNIE 3.0 base (GELU, 2,048 positions, 4 segments, 3 task types).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from plm_toolkit.core.errors import ConfigError
from plm_toolkit.core.registry import MODELS
from plm_toolkit.models.bert import Bert, BertConfig, build_embeddings
from plm_toolkit.nn.embeddings import TokenEmbeddings


@dataclass
class ErnieConfig(BertConfig):
    # Registry name of the family.
    name: str = "ernie"
    # Add a learned task-type embedding to every input token (ERNIE 2.0 / 3.0); ERNIE 1.0 has none.
    use_task_id: bool = False
    # Rows of the task-type table that task_type_ids may name (ERNIE 3.0 base: 3).
    task_type_vocab_size: int = 3


class ErnieEmbeddings(TokenEmbeddings):
    """BERT's token + position + segment sum, plus the task-type embedding of ``task_type_ids`` (task 0 when none
    is given, as transformers does), before the LayerNorm."""

    def __init__(self, *args, task_type_vocab_size: int = 0):
        super().__init__(*args)
        width = self.word_embeddings.embedding_dim
        self.task_type_embeddings = nn.Embedding(task_type_vocab_size, width) if task_type_vocab_size else None

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        task_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        extra = None
        if self.task_type_embeddings is not None:
            table = self.task_type_embeddings
            extra = table.weight[0] if task_type_ids is None else table(task_type_ids)  # (E,) or (B, T, E)
        return super().forward(input_ids, token_type_ids, position_ids, extra=extra)


@MODELS.register("ernie", ErnieConfig)
class Ernie(Bert):
    """``forward(input_ids, attention_mask, token_type_ids, ..., task_type_ids=None)``: BERT's, with task types."""

    summary_token = "[CLS]"

    fields_at_least_zero = frozenset({"task_type_vocab_size"})

    @classmethod
    def check_config(cls, config: ErnieConfig) -> None:
        super().check_config(config)
        if config.task_type_vocab_size < 1:
            raise ConfigError(f"model.task_type_vocab_size={config.task_type_vocab_size}: must be at least 1")

    def build_embeddings(self, config: ErnieConfig) -> TokenEmbeddings:
        tasks = config.task_type_vocab_size if config.use_task_id else 0
        return build_embeddings(config, ErnieEmbeddings, task_type_vocab_size=tasks)
