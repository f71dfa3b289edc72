"""Hugging Face adapter of ALBERT: BERT's encoder layout (``hf_bert.py``) with ALBERT's names.

``albert_layer_groups.{g}.albert_layers.0`` is our ``encoder.layers.{g}``: one group is ``sharing: all``, one group
per layer ``sharing: none``; attention-only and ffn-only sharing have no Hugging Face layout.
``embedding_hidden_mapping_in`` is our ``embeddings_project``. Heads (objective ``mlm_sop``): ``mlm.head.*`` <->
``predictions.*`` (decoder tied), ``sop.head.*`` <-> ``sop_classifier.classifier.*``. Task heads as BERT's
(``classifier`` over the pooler or the tokens, ``qa_outputs``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from plm_toolkit.core.choices import choice
from plm_toolkit.core.errors import CheckpointError
from plm_toolkit.interop.hf import ADAPTERS, ExportPart
from plm_toolkit.interop.hf_bert import EncoderAdapter, encoder_task_heads, mlm_head
from plm_toolkit.models.albert import AlbertConfig, Sharing


@ADAPTERS.register
class AlbertAdapter(EncoderAdapter):
    model_type = "albert"
    family = "albert"
    objective = "mlm_sop"
    prefix = "albert."
    layer = "encoder.albert_layer_groups.{i}.albert_layers.0."
    layer_modules = {
        "attention.query": "attention.query",
        "attention.key": "attention.key",
        "attention.value": "attention.value",
        "attention.output": "attention.dense",
        "attention_layer_norm": "attention.LayerNorm",
        "feed_forward.intermediate": "ffn",
        "feed_forward.output": "ffn_output",
        "output_layer_norm": "full_layer_layer_norm",
    }
    pooler = {"pooler.dense.weight": "pooler.weight", "pooler.dense.bias": "pooler.bias"}
    projection = {f"embeddings_project.{p}": f"encoder.embedding_hidden_mapping_in.{p}" for p in ("weight", "bias")}
    heads = mlm_head("mlm.head.", "predictions.", "dense", "LayerNorm", "bias") | {
        f"sop.head.{p}": f"sop_classifier.classifier.{p}" for p in ("weight", "bias")
    }
    decoder = "predictions.decoder.weight"
    redundant = ("embeddings.position_ids", "predictions.decoder.weight", "predictions.decoder.bias")
    architectures = {
        frozenset(): "AlbertModel",
        frozenset({"mlm"}): "AlbertForMaskedLM",
        frozenset({"mlm", "sop"}): "AlbertForPreTraining",
    }
    extra_config = {"embedding_size": "embedding_size"}
    task_layouts = encoder_task_heads("Albert")

    def make_config(self, fields: dict[str, Any], pad: int | None, hf: dict, path: Path) -> AlbertConfig:
        groups, inner = hf.get("num_hidden_groups", 1), hf.get("inner_group_num", 1)
        if inner != 1 or groups not in (1, fields["num_layers"]):
            raise CheckpointError(
                f"{path}: num_hidden_groups={groups}, inner_group_num={inner}; supported: one group (sharing all) or "
                "one per layer (sharing none), one layer per group"
            )
        sharing = Sharing.all if groups == 1 else Sharing.none
        return AlbertConfig(**fields, pad_token_id=0 if pad is None else pad, sharing=sharing)

    def config_to_hf(self, config: AlbertConfig, architecture: str) -> dict:
        groups = 1 if choice(config.sharing) == "all" else config.num_layers
        return super().config_to_hf(config, architecture) | {"num_hidden_groups": groups, "inner_group_num": 1}

    def export(self, model, objective_state: dict[str, torch.Tensor], objective_config: Any) -> list[ExportPart]:
        sharing = choice(model.config.sharing)
        if sharing not in ("all", "none"):
            raise CheckpointError(f"model.sharing={sharing} has no Hugging Face ALBERT layout (only all and none)")
        return super().export(model, objective_state, objective_config)
