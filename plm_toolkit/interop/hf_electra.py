"""Hugging Face adapter of ELECTRA: the discriminator in BERT's encoder layout (``hf_bert.py``), the generator a
second folder.

The discriminator is the backbone: ``discriminator_head.*`` (objective ``rtd``) <-> ``discriminator_predictions.*``
(``ElectraForPreTraining``). The generator folder (``generator_folder=``, or ``<folder>/generator``) is an
``ElectraForMaskedLM`` that goes into the ``rtd`` objective's state, reading the discriminator's embeddings (ELECTRA
ties them, so the generator's copy is checked and dropped); export writes it back to ``<folder>/generator``. Its head
count is not in its weights: export takes it from the ``rtd`` config the run used (``objective_config``), through the
same rule the objective applied, and refuses without it.

Fine-tuned releases: ``ElectraForSequenceClassification``'s ``classifier.dense`` (gelu) + ``classifier.out_proj``
over the first token, ``ElectraForTokenClassification``'s ``classifier``, ``ElectraForQuestionAnswering``'s
``qa_outputs``.
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Any

import torch

from plm_toolkit.core.choices import choice
from plm_toolkit.core.errors import CheckpointError
from plm_toolkit.interop.hf import (
    ADAPTERS,
    CONFIG_FILE,
    ExportPart,
    HFImport,
    check_shapes,
    objective_shapes,
    read_json,
    read_weights,
    some,
)
from plm_toolkit.interop.hf_bert import (
    EMBEDDING_KEYS,
    MULTIPLE_CHOICE,
    EncoderAdapter,
    encoder_keys,
    encoder_task_heads,
    normalize_names,
)
from plm_toolkit.interop.hf_heads import HeadLayout, linear_keys, unmapped
from plm_toolkit.models.bert import BertConfig, embedding_width
from plm_toolkit.models.electra import ElectraConfig
from plm_toolkit.nn.heads import head_activation
from plm_toolkit.objectives.rtd import RtdConfig, generator_config

GENERATOR_FOLDER = "generator"
# The generator's head, ours (in the rtd objective) -> ElectraForMaskedLM's.
GENERATOR_HEAD = {
    "generator.head.dense.weight": "generator_predictions.dense.weight",
    "generator.head.dense.bias": "generator_predictions.dense.bias",
    "generator.head.layer_norm.weight": "generator_predictions.LayerNorm.weight",
    "generator.head.layer_norm.bias": "generator_predictions.LayerNorm.bias",
    "generator.head.bias": "generator_lm_head.bias",
}


@ADAPTERS.register
class ElectraAdapter(EncoderAdapter):
    model_type = "electra"
    family = "electra"
    objective = "rtd"
    prefix = "electra."
    pooler = {}
    projection = {f"embeddings_project.{p}": f"embeddings_project.{p}" for p in ("weight", "bias")}
    heads = {
        f"discriminator_head.{ours}.{p}": f"discriminator_predictions.{theirs}.{p}"
        for ours, theirs in (("dense", "dense"), ("prediction", "dense_prediction"))
        for p in ("weight", "bias")
    }
    architectures = {frozenset(): "ElectraModel", frozenset({"discriminator_head"}): "ElectraForPreTraining"}
    extra_config = {"embedding_size": "embedding_size"}
    # ElectraClassificationHead: out_proj(dropout(gelu(dense(dropout(h[CLS]))))): the head's own dense layer.
    task_layouts = encoder_task_heads(
        "Electra",
        HeadLayout(
            "sequence",
            linear_keys("classifier.dense", "dense") | linear_keys("classifier.out_proj"),
            activation="gelu",
            summary="first",
        ),
        unmapped(MULTIPLE_CHOICE, "sequence_summary.summary", "classifier"),
    )

    def make_config(self, fields: dict[str, Any], pad: int | None, hf: dict, path: Path) -> ElectraConfig:
        return ElectraConfig(**fields, pad_token_id=0 if pad is None else pad)

    def generator_keys(self, config: BertConfig, prefix: str = "") -> dict[str, str]:
        """Our rtd objective's generator keys -> ElectraForMaskedLM's (embeddings excluded: they are shared)."""
        projection = embedding_width(config) != config.hidden_size
        body = encoder_keys(self, config.num_layers, projection, pooler=False)
        names = {f"generator.{ours}": prefix + theirs for ours, theirs in body.items() if ours not in EMBEDDING_KEYS}
        return names | GENERATOR_HEAD

    def import_state(
        self,
        state: dict[str, torch.Tensor],
        config: ElectraConfig,
        weights_file: Path,
        folder: Path,
        generator_folder: str | Path | None = None,
        **options: Any,
    ) -> HFImport:
        imported = super().import_state(state, config, weights_file, folder)
        generator_folder = Path(generator_folder or folder / GENERATOR_FOLDER)
        if (generator_folder / CONFIG_FILE).is_file():
            generator, overrides = self.import_generator(generator_folder, config, imported.model_state)
            imported.objective_state.update(generator)
            imported.objective_overrides = overrides
        return imported

    def import_generator(
        self, folder: Path, discriminator: ElectraConfig, model_state: dict[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        hf = read_json(folder / CONFIG_FILE)
        if hf.get("model_type") != "electra":
            raise CheckpointError(f"{folder / CONFIG_FILE}: model_type is {hf.get('model_type')!r}; expected 'electra'")
        config = self.config_from_hf(hf, folder / CONFIG_FILE)
        if (config.vocab_size, embedding_width(config)) != (discriminator.vocab_size, embedding_width(discriminator)):
            raise CheckpointError(
                f"{folder / CONFIG_FILE}: vocab_size/embedding_size {config.vocab_size}/{embedding_width(config)} "
                f"differ from the discriminator's {discriminator.vocab_size}/{embedding_width(discriminator)}; "
                "ELECTRA shares them"
            )
        weights_file, state = read_weights(folder)
        normalize_names(state, self.prefix)
        for ours, theirs in EMBEDDING_KEYS.items():
            value = state.pop(theirs, None)
            if value is not None and not torch.equal(value, model_state[ours]):
                warnings.warn(
                    f"{weights_file}: {theirs} differs from the discriminator's; ELECTRA shares the embeddings, the "
                    "discriminator's are used",
                    stacklevel=5,
                )
        lm_weight = state.pop("generator_lm_head.weight", None)
        if lm_weight is not None and not torch.equal(lm_weight, model_state["embeddings.word_embeddings.weight"]):
            raise CheckpointError(f"{weights_file}: generator_lm_head.weight is not tied to the word embeddings")
        state.pop("embeddings.position_ids", None)
        overrides = {
            "generator_hidden_size": config.hidden_size,
            "generator_num_heads": config.num_heads,
            "generator_intermediate_size": config.intermediate_size,
            "generator_num_layers": config.num_layers,
        }
        names = self.generator_keys(config)
        missing = [theirs for theirs in names.values() if theirs not in state]
        if missing:
            raise CheckpointError(f"{weights_file}: missing key(s) {some(missing)}")
        out = {ours: state.pop(theirs) for ours, theirs in names.items()}
        if state:
            raise CheckpointError(f"{weights_file}: unexpected key(s) {some(sorted(state))}")
        shapes = objective_shapes("rtd", discriminator, overrides)
        check_shapes(weights_file, out, {k: v for k, v in shapes.items() if k in out}, names)
        return out, overrides

    def export(self, model, objective_state: dict[str, torch.Tensor], objective_config: Any) -> list[ExportPart]:
        generator = {k: v for k, v in objective_state.items() if k.startswith("generator.")}
        heads = {k: v for k, v in objective_state.items() if k not in generator}
        parts = super().export(model, heads, objective_config)
        if generator:
            parts.append(self.export_generator(model, generator, objective_config))
        return parts

    def export_generator(self, model, generator: dict[str, torch.Tensor], objective_config: Any) -> ExportPart:
        if objective_config is None:
            raise CheckpointError(
                "the generator's head count is not in its weights: export it with the rtd objective config the run "
                "used (plm-export reads it from the checkpoint's config.yaml), or leave the generator out"
            )
        rtd = objective_config
        if not isinstance(rtd, RtdConfig):
            names = {f.name for f in dataclasses.fields(RtdConfig)}
            rtd = RtdConfig(**{k: rtd[k] for k in names if k in rtd})
        config = dataclasses.replace(generator_config(rtd, model.config), name="electra")
        names = self.generator_keys(config, self.prefix)
        absent = [ours for ours in names if ours not in generator]
        shapes = objective_shapes("rtd", model.config, {f.name: getattr(rtd, f.name) for f in dataclasses.fields(rtd)})
        wrong = [k for k, v in generator.items() if k not in shapes or shapes[k] != v.shape]
        if absent or wrong or len(names) != len(generator):
            raise CheckpointError(
                f"the generator weights do not fit the rtd config given (missing {absent[:3]}, not fitting "
                f"{wrong[:3]}); export with the objective config of the run that trained them"
            )
        if choice(head_activation(config)) != "gelu":
            raise CheckpointError(
                f"model.head_act={choice(head_activation(config))}: transformers' ElectraForMaskedLM head applies "
                "gelu, so the generator would not export exactly"
            )
        state = model.state_dict()
        tensors = {self.prefix + theirs: state[ours] for ours, theirs in EMBEDDING_KEYS.items()}
        tensors.update({theirs: generator[ours] for ours, theirs in names.items()})
        return ExportPart(GENERATOR_FOLDER, tensors, self.config_to_hf(config, "ElectraForMaskedLM"))
