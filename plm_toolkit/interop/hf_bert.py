"""Hugging Face adapters of BERT and RoBERTa (a BERT preset here), and the encoder layout that ALBERT and ELECTRA
reuse (``hf_albert.py``, ``hf_electra.py``): a plain table of names (ours -> theirs) for the backbone, the layers
and the objective heads, plus the few config keys that differ.

Heads travel in the layout of the family's paper objective (its ``objective.safetensors`` keys):

=========  ===================================  ==============================================
family     ours                                 Hugging Face
=========  ===================================  ==============================================
bert       ``mlm.head.*``, ``nsp.head.*``        ``cls.predictions.*``, ``cls.seq_relationship.*``
roberta    ``head.*`` (objective ``mlm``)        ``lm_head.*``
=========  ===================================  ==============================================

MLM decoders are tied to the word embeddings, so they have no key of their own. The task heads of fine-tuned
releases (``encoder_task_heads``): ``classifier`` over the pooler (sequences) or over every token, ``qa_outputs``
for spans; RoBERTa's sequence head is ``classifier.dense`` (our pooler: a tanh dense layer over the first token) and
``classifier.out_proj``. RoBERTa numbers positions from
``padding_idx + 1`` (``position_offset = pad_token_id + 1`` here), and its LM head always applies the exact gelu
(``head_act: gelu``), where BERT's applies ``hidden_act``.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any, ClassVar

import torch

from plm_toolkit.core.choices import choice
from plm_toolkit.core.data_schema import TokenizerKind
from plm_toolkit.core.errors import CheckpointError
from plm_toolkit.core.registry import MODELS
from plm_toolkit.interop.hf import (
    ACT_FROM_HF,
    ACT_TO_HF,
    ADAPTERS,
    Adapter,
    ExportPart,
    HFImport,
    config_values,
    drop_tied,
    some,
)
from plm_toolkit.interop.hf_heads import HeadLayout, linear_keys, unmapped
from plm_toolkit.interop.hf_tokenizer import WITHOUT_TOKEN_TYPES, TokenizerLayout
from plm_toolkit.models.bert import BertConfig, embedding_width
from plm_toolkit.nn.feed_forward import HiddenAct
from plm_toolkit.nn.heads import head_activation

log = logging.getLogger("plm_toolkit")

# Our BertConfig field <- Hugging Face config.json key (every family of the encoder layout has them).
CONFIG_FROM_HF = {
    "vocab_size": "vocab_size",
    "hidden_size": "hidden_size",
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "intermediate_size": "intermediate_size",
    "hidden_dropout": "hidden_dropout_prob",
    "attention_dropout": "attention_probs_dropout_prob",
    "max_position_embeddings": "max_position_embeddings",
    "type_vocab_size": "type_vocab_size",
    "layer_norm_eps": "layer_norm_eps",
    "initializer_range": "initializer_range",
}
EMBEDDING_KEYS = {
    "embeddings.word_embeddings.weight": "embeddings.word_embeddings.weight",
    "embeddings.position_embeddings.weight": "embeddings.position_embeddings.weight",
    "embeddings.token_type_embeddings.weight": "embeddings.token_type_embeddings.weight",
    "embeddings.layer_norm.weight": "embeddings.LayerNorm.weight",
    "embeddings.layer_norm.bias": "embeddings.LayerNorm.bias",
}
LAYER_MODULES = {
    "attention.query": "attention.self.query",
    "attention.key": "attention.self.key",
    "attention.value": "attention.self.value",
    "attention.output": "attention.output.dense",
    "attention_layer_norm": "attention.output.LayerNorm",
    "feed_forward.intermediate": "intermediate.dense",
    "feed_forward.output": "output.dense",
    "output_layer_norm": "output.LayerNorm",
}
POOLER_KEYS = {"pooler.dense.weight": "pooler.dense.weight", "pooler.dense.bias": "pooler.dense.bias"}
MULTIPLE_CHOICE = "a multiple-choice head, one score per answer option: no task here reads one"


def encoder_task_heads(
    name: str, sequence: HeadLayout | None = None, choice: HeadLayout | None = None
) -> dict[str, HeadLayout]:
    """The task heads transformers writes for an encoder of BERT's layout; ``name`` prefixes its classes ("Bert").
    By default the sequence head is ``classifier`` over the pooler (BERT section 4.1)."""
    pooled = HeadLayout("sequence", linear_keys("classifier"), summary="pooled")
    return {
        f"{name}ForSequenceClassification": sequence or pooled,
        f"{name}ForTokenClassification": HeadLayout("token", linear_keys("classifier")),
        f"{name}ForQuestionAnswering": HeadLayout("span", linear_keys("qa_outputs")),
        f"{name}ForMultipleChoice": choice or unmapped(MULTIPLE_CHOICE, "classifier"),
    }


def mlm_head(ours: str, theirs: str, dense: str, layer_norm: str, bias: str) -> dict[str, str]:
    names = {f"{ours}dense.{p}": f"{theirs}{dense}.{p}" for p in ("weight", "bias")}
    names |= {f"{ours}layer_norm.{p}": f"{theirs}{layer_norm}.{p}" for p in ("weight", "bias")}
    return names | {f"{ours}bias": f"{theirs}{bias}"}


def normalize_names(state: dict[str, torch.Tensor], prefix: str) -> None:
    """In place: drop the family prefix of checkpoints with heads and rename TF-era LayerNorm gamma / beta."""
    renamed = {}
    for key, value in state.items():
        key = key.removeprefix(prefix)
        if ".LayerNorm." in key:
            key = key.replace(".gamma", ".weight").replace(".beta", ".bias")
        renamed[key] = value
    state.clear()
    state.update(renamed)


def encoder_keys(adapter: EncoderAdapter, num_distinct: int, projection: bool, pooler: bool) -> dict[str, str]:
    """Our encoder-layout backbone keys -> theirs, for ``num_distinct`` stored layers."""
    names = dict(EMBEDDING_KEYS)
    if projection:
        names.update(adapter.projection)
    for i in range(num_distinct):
        for ours, theirs in adapter.layer_modules.items():
            for param in ("weight", "bias"):
                names[f"encoder.layers.{i}.{ours}.{param}"] = adapter.layer.format(i=i) + f"{theirs}.{param}"
    if pooler:
        names.update(adapter.pooler)
    return names


class EncoderAdapter(Adapter):
    """An encoder in BERT's checkpoint layout; subclasses fill the tables."""

    # Hugging Face prefix of distinct layer i, and its module names.
    layer: ClassVar[str] = "encoder.layer.{i}."
    layer_modules: ClassVar[dict[str, str]] = LAYER_MODULES
    # Backbone keys besides embeddings and layers, ours -> theirs: the pooler and the E -> H projection.
    pooler: ClassVar[dict[str, str]] = POOLER_KEYS
    projection: ClassVar[dict[str, str]] = {}
    # Objective-state key (ours) -> theirs.
    heads: ClassVar[dict[str, str]]
    # Tied decoder weight key (theirs), checked equal to the word embeddings and dropped.
    decoder: ClassVar[str | None] = None
    # Keys that hold nothing of their own (a position-id buffer, the tied decoder's copy of the bias).
    redundant: ClassVar[tuple[str, ...]] = ("embeddings.position_ids",)
    # Head groups present (first component of our key) -> architecture name.
    architectures: ClassVar[dict[frozenset[str], str]]
    # config.json keys beyond CONFIG_FROM_HF (ALBERT's and ELECTRA's embedding_size).
    extra_config: ClassVar[dict[str, str]] = {}
    # The task heads of fine-tuned releases (``encoder_task_heads``).
    task_layouts: ClassVar[dict[str, HeadLayout]] = {}

    def task_heads(self, hf: dict) -> dict[str, HeadLayout]:
        return self.task_layouts

    # --- config ---------------------------------------------------------------------------------------------
    def config_from_hf(self, hf: dict, path: Path) -> BertConfig:
        if hf.get("position_embedding_type", "absolute") != "absolute":
            raise CheckpointError(
                f"{path}: position_embedding_type is {hf['position_embedding_type']!r}; only 'absolute' is supported"
            )
        act = hf.get("hidden_act", "gelu")
        if act not in ACT_FROM_HF:
            raise CheckpointError(f"{path}: hidden_act {act!r} is not one of {', '.join(ACT_FROM_HF)}")
        fields = config_values(hf, CONFIG_FROM_HF | self.extra_config, path) | {"hidden_act": ACT_FROM_HF[act]}
        return self.make_config(fields, hf.get("pad_token_id"), hf, path)

    def make_config(self, fields: dict[str, Any], pad: int | None, hf: dict, path: Path) -> BertConfig:
        return BertConfig(**fields, pad_token_id=0 if pad is None else pad)

    def config_to_hf(self, config: BertConfig, architecture: str) -> dict:
        hf = {theirs: getattr(config, ours) for ours, theirs in CONFIG_FROM_HF.items()}
        hf.update(
            architectures=[architecture],
            model_type=self.model_type,
            hidden_act=ACT_TO_HF[choice(config.hidden_act)],
            pad_token_id=config.pad_token_id,
            position_embedding_type="absolute",
            tie_word_embeddings=True,
        )
        return hf | {theirs: embedding_width(config) for theirs in self.extra_config.values()}

    def head_act_in_hf(self, config: BertConfig) -> str:
        """The activation transformers' MLM head of this family applies (BERT's and ALBERT's: hidden_act)."""
        return choice(config.hidden_act)

    # --- names ----------------------------------------------------------------------------------------------
    def backbone_keys(self, config: BertConfig) -> dict[str, str]:
        with torch.device("meta"):
            model = MODELS.get(config.name).builder(config)
        layers, projection = len(model.encoder.layers), model.embeddings_project is not None
        return encoder_keys(self, layers, projection, model.pooler is not None)

    def heads_to_hf(self, objective_state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], frozenset]:
        """Heads in Hugging Face names and the head groups present; the plain ``mlm`` objective's ``head.*`` and
        the combined objectives' ``mlm.head.*`` are accepted for every family."""
        heads = {}
        for key, value in objective_state.items():
            ours = (
                key.removeprefix("mlm.")
                if self.objective == "mlm"
                else "mlm." + key
                if key.startswith("head.")
                else key
            )
            if ours not in self.heads:
                raise CheckpointError(
                    f"objective state key {key!r} has no place in a Hugging Face {self.model_type.upper()} checkpoint"
                )
            heads[self.heads[ours]] = value
        groups = frozenset(ours.split(".")[0] for ours, theirs in self.heads.items() if theirs in heads)
        for group in groups:
            absent = [o for o, t in self.heads.items() if o.split(".")[0] == group and t not in heads]
            if absent:
                raise CheckpointError(f"objective state has part of the {group} head; missing {', '.join(absent)}")
        return heads, groups

    # --- import / export ------------------------------------------------------------------------------------
    def import_state(
        self, state: dict[str, torch.Tensor], config: BertConfig, weights_file: Path, folder: Path, **options: Any
    ) -> HFImport:
        normalize_names(state, self.prefix)
        if self.decoder is not None:
            drop_tied(state, self.decoder, state.get("embeddings.word_embeddings.weight"), weights_file)
        names = self.backbone_keys(config)
        missing = [theirs for ours, theirs in names.items() if theirs not in state and ours not in self.pooler]
        if missing:
            raise CheckpointError(f"{weights_file}: missing key(s) {some(missing)}")
        model_state = {ours: state.pop(theirs) for ours, theirs in names.items() if theirs in state}
        initialized = [ours for ours in names if ours not in model_state]
        if initialized:
            # A masked-LM checkpoint drops the pooler; a fresh one keeps the model whole (NSP, SOP or
            # classification train it). A fine-tuned token or span head's folder has none either: whoever decides
            # on its head says so (tasks/checkpoint_head.py), in the same line.
            if options.get("task_head") is None:
                warnings.warn(f"{weights_file} has no pooler; it starts from a fresh BERT init", stacklevel=4)
            model_state.update(fresh_pooler(config, {ours: self.pooler[ours] for ours in initialized}))
        objective_state = {ours: state.pop(theirs) for ours, theirs in self.heads.items() if theirs in state}
        for key in self.redundant:
            state.pop(key, None)
        names |= self.heads
        return HFImport(config, model_state, objective_state, None, initialized, self.objective, source_keys=names)

    def export(self, model, objective_state: dict[str, torch.Tensor], objective_config: Any) -> list[ExportPart]:
        config = model.config
        if config.position_offset and self.model_type != "roberta":
            raise CheckpointError(
                f"model.position_offset={config.position_offset}: Hugging Face's {self.model_type} has none"
            )
        heads, groups = self.heads_to_hf(objective_state)
        if groups not in self.architectures:
            raise CheckpointError(
                f"objective heads {', '.join(sorted(groups))} make no Hugging Face {self.model_type} checkpoint"
            )
        wanted = self.head_act_in_hf(config)
        if groups & {"mlm", "head"} and choice(head_activation(config)) != wanted:
            raise CheckpointError(
                f"model.head_act={choice(head_activation(config))}: transformers' {self.model_type} LM head applies "
                f"{wanted}, so this export would not be exact; keep the heads out or set model.head_act={wanted}"
            )
        prefix = self.prefix if heads else ""
        state = model.state_dict()
        tensors = {prefix + theirs: state[ours] for ours, theirs in self.backbone_keys(config).items()}
        hf_config = self.config_to_hf(config, self.architectures[groups])
        return [ExportPart("", tensors | heads, hf_config)]


def fresh_pooler(config: BertConfig, names: dict[str, str]) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(config.hidden_size, config.hidden_size, generator=generator) * config.initializer_range
    return {key: weight if key.endswith("weight") else torch.zeros(config.hidden_size) for key in names}


@ADAPTERS.register
class BertAdapter(EncoderAdapter):
    model_type = "bert"
    family = "bert"
    objective = "mlm_nsp"
    prefix = "bert."
    heads = mlm_head("mlm.head.", "cls.predictions.", "transform.dense", "transform.LayerNorm", "bias") | {
        f"nsp.head.{p}": f"cls.seq_relationship.{p}" for p in ("weight", "bias")
    }
    decoder = "cls.predictions.decoder.weight"
    redundant = ("embeddings.position_ids", "cls.predictions.decoder.weight", "cls.predictions.decoder.bias")
    architectures = {
        frozenset(): "BertModel",
        frozenset({"mlm"}): "BertForMaskedLM",
        frozenset({"nsp"}): "BertForNextSentencePrediction",
        frozenset({"mlm", "nsp"}): "BertForPreTraining",
    }
    task_layouts = encoder_task_heads("Bert")

    def exports(self, config: Any) -> bool:
        return config.name == "bert" and not config.position_offset

    def config_from_hf(self, hf: dict, path: Path) -> BertConfig:
        # HFL's chinese-roberta-wwm-ext: RoBERTa's training recipe on BERT's architecture, WordPiece and token types.
        named = " ".join([*path.parent.parts[-3:], str(hf.get("_name_or_path", ""))])
        if "roberta" in named.lower():
            log.info(
                "%s: a RoBERTa name on model_type 'bert' (%s), as HFL's Chinese RoBERTa-wwm releases are: BERT's "
                "architecture, WordPiece vocabulary and token types; imported as BERT (model=bert)",
                path.parent, ", ".join(hf.get("architectures") or ["no architectures"]),
            )  # fmt: skip
        return super().config_from_hf(hf, path)


@ADAPTERS.register
class RobertaAdapter(EncoderAdapter):
    model_type = "roberta"
    family = "bert"
    objective = "mlm"
    prefix = "roberta."
    heads = mlm_head("head.", "lm_head.", "dense", "layer_norm", "bias")
    decoder = "lm_head.decoder.weight"
    redundant = ("embeddings.position_ids", "lm_head.decoder.weight", "lm_head.decoder.bias")
    architectures = {frozenset(): "RobertaModel", frozenset({"head"}): "RobertaForMaskedLM"}
    # One token type: transformers' RoBERTa tokenizer returns none.
    tokenizer = TokenizerLayout(model_input_names=WITHOUT_TOKEN_TYPES)
    # RobertaClassificationHead: out_proj(dropout(tanh(dense(dropout(h[<s>]))))); its tanh dense layer over the
    # first token is exactly our pooler, so it becomes the pooler (its checkpoint has none) and out_proj our linear.
    task_layouts = encoder_task_heads(
        "Roberta",
        HeadLayout(
            "sequence",
            linear_keys("classifier.out_proj"),
            backbone={f"classifier.dense.{p}": f"pooler.dense.{p}" for p in ("weight", "bias")},
            summary="pooled",
        ),
    )

    def exports(self, config: Any) -> bool:
        return config.name == "bert" and bool(config.position_offset)

    def make_config(self, fields: dict[str, Any], pad: int | None, hf: dict, path: Path) -> BertConfig:
        pad = 1 if pad is None else pad
        return BertConfig(
            **fields, pad_token_id=pad, position_offset=pad + 1, tokenizer=TokenizerKind.bpe, head_act=HiddenAct.gelu
        )

    def head_act_in_hf(self, config: BertConfig) -> str:
        return "gelu"  # RobertaLMHead applies transformers' gelu whatever hidden_act is

    def export(self, model, objective_state: dict[str, torch.Tensor], objective_config: Any) -> list[ExportPart]:
        config = model.config
        if config.position_offset != config.pad_token_id + 1:
            raise CheckpointError(
                f"model.position_offset={config.position_offset}: Hugging Face's RoBERTa numbers positions from "
                f"pad_token_id + 1 = {config.pad_token_id + 1}"
            )
        return super().export(model, objective_state, objective_config)
