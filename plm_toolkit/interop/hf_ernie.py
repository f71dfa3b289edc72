"""Hugging Face adapter of ERNIE: BERT's encoder layout (``hf_bert.py``) under the ``ernie.`` prefix, plus the
task-type table (``embeddings.task_type_embeddings``) and its two config keys (``use_task_id``,
``task_type_vocab_size``).

Heads as BERT's: ``mlm.head.*`` <-> ``cls.predictions.*`` (decoder tied), ``nsp.head.*`` <->
``cls.seq_relationship.*``: ``ErnieForPreTraining`` with both, ``ErnieForMaskedLM`` with the MLM head alone, which
is what a ``knowledge_masking`` run holds (its ``head.*`` keys export as the MLM head). transformers' ERNIE head
applies ``hidden_act``, as BERT's does. Task heads as BERT's, in ``ErnieFor*`` folders.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from plm_toolkit.interop.hf import ADAPTERS
from plm_toolkit.interop.hf_bert import BertAdapter, encoder_task_heads
from plm_toolkit.models.ernie import ErnieConfig

TASK_TYPE_KEY = "embeddings.task_type_embeddings.weight"


@ADAPTERS.register
class ErnieAdapter(BertAdapter):
    model_type = "ernie"
    family = "ernie"
    prefix = "ernie."
    architectures = {
        frozenset(): "ErnieModel",
        frozenset({"mlm"}): "ErnieForMaskedLM",
        frozenset({"nsp"}): "ErnieForNextSentencePrediction",
        frozenset({"mlm", "nsp"}): "ErnieForPreTraining",
    }
    task_layouts = encoder_task_heads("Ernie")

    def exports(self, config: Any) -> bool:
        return config.name == "ernie"

    def make_config(self, fields: dict[str, Any], pad: int | None, hf: dict, path: Path) -> ErnieConfig:
        return ErnieConfig(
            **fields,
            pad_token_id=0 if pad is None else pad,
            use_task_id=bool(hf.get("use_task_id", False)),
            task_type_vocab_size=int(hf.get("task_type_vocab_size", 3)),
        )

    def config_to_hf(self, config: ErnieConfig, architecture: str) -> dict:
        hf = super().config_to_hf(config, architecture)
        return hf | {"use_task_id": config.use_task_id, "task_type_vocab_size": config.task_type_vocab_size}

    def backbone_keys(self, config: ErnieConfig) -> dict[str, str]:
        names = super().backbone_keys(config)
        return names | ({TASK_TYPE_KEY: TASK_TYPE_KEY} if config.use_task_id else {})
