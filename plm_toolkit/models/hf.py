"""Import and export of Hugging Face checkpoint folders for the encoder family: BERT, RoBERTa, ALBERT, ELECTRA.

A Hugging Face folder holds ``config.json``, the weights (``model.safetensors``, or ``pytorch_model.bin`` in older
releases) and a tokenizer (``tokenizer.json``, ``vocab.txt``, or RoBERTa's ``vocab.json`` + ``merges.txt``).
``import_hf(folder)`` reads config.json's ``model_type`` and picks the family's adapter: a plain table of names
(ours -> theirs) for the backbone, the layers and the objective heads, plus the few config keys that differ.
Nothing here imports ``transformers``.

Heads travel in the layout of the family's paper objective (its ``objective.safetensors`` keys):

=========  =========================================  ==============================================
family     ours                                       Hugging Face
=========  =========================================  ==============================================
bert       ``mlm.head.*``, ``nsp.head.*``              ``cls.predictions.*``, ``cls.seq_relationship.*``
roberta    ``head.*`` (objective ``mlm``)              ``lm_head.*``
albert     ``mlm.head.*``, ``sop.head.*``              ``predictions.*``, ``sop_classifier.classifier.*``
electra    ``discriminator_head.*``, ``generator.*``    ``discriminator_predictions.*``; the generator is a
                                                       second folder (``ElectraForMaskedLM``)
=========  =========================================  ==============================================

MLM decoders are tied to the word embeddings, so they have no key of their own. Family quirks:
- RoBERTa numbers positions from ``padding_idx + 1``: ``position_offset = pad_token_id + 1`` here.
- ALBERT's ``albert_layer_groups.{g}.albert_layers.0`` is our ``encoder.layers.{g}``: one group is
  ``sharing: all``, one group per layer ``sharing: none``; attention-only and ffn-only sharing have no Hugging Face
  layout. ``embedding_hidden_mapping_in`` is our ``embeddings_project``.
- ELECTRA's discriminator is the backbone; its generator folder (``generator_folder``, or ``<folder>/generator``
  when present) goes into the ``rtd`` objective's state, reading the discriminator's embeddings (ELECTRA ties
  them, so the generator's copy is checked and dropped). Export writes the generator to ``<folder>/generator``.
"""

from __future__ import annotations

import json
import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from plm_toolkit.config.schema import TokenizerKind
from plm_toolkit.data.vocab import Vocab
from plm_toolkit.errors import CheckpointError
from plm_toolkit.models.albert import AlbertConfig, Sharing
from plm_toolkit.models.bert import Bert, BertConfig, embedding_width
from plm_toolkit.models.electra import ElectraConfig
from plm_toolkit.registry import MODELS, OBJECTIVES
from plm_toolkit.training.checkpoint import read_torch_weights

CONFIG_FILE = "config.json"
SAFETENSORS_FILE = "model.safetensors"
TORCH_FILE = "pytorch_model.bin"
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json")

# Activation names: Hugging Face's gelu is the exact erf form; gelu_new and gelu_pytorch_tanh are the tanh one.
_ACT_FROM_HF = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}
_ACT_TO_HF = {"gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh", "relu": "relu"}

# Our BertConfig field <- Hugging Face config.json key (every family of the table has them).
_CONFIG_FROM_HF = {
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

# Backbone names, ours -> Hugging Face's (without the family prefix of checkpoints with heads).
_EMBEDDING_KEYS = {
    "embeddings.word_embeddings.weight": "embeddings.word_embeddings.weight",
    "embeddings.position_embeddings.weight": "embeddings.position_embeddings.weight",
    "embeddings.token_type_embeddings.weight": "embeddings.token_type_embeddings.weight",
    "embeddings.layer_norm.weight": "embeddings.LayerNorm.weight",
    "embeddings.layer_norm.bias": "embeddings.LayerNorm.bias",
}
_LAYER_MODULES = {
    "attention.query": "attention.self.query",
    "attention.key": "attention.self.key",
    "attention.value": "attention.self.value",
    "attention.output": "attention.output.dense",
    "attention_layer_norm": "attention.output.LayerNorm",
    "feed_forward.intermediate": "intermediate.dense",
    "feed_forward.output": "output.dense",
    "output_layer_norm": "output.LayerNorm",
}
_ALBERT_LAYER_MODULES = {
    "attention.query": "attention.query",
    "attention.key": "attention.key",
    "attention.value": "attention.value",
    "attention.output": "attention.dense",
    "attention_layer_norm": "attention.LayerNorm",
    "feed_forward.intermediate": "ffn",
    "feed_forward.output": "ffn_output",
    "output_layer_norm": "full_layer_layer_norm",
}
_POOLER_KEYS = {"pooler.dense.weight": "pooler.dense.weight", "pooler.dense.bias": "pooler.dense.bias"}
_HEAD_KEYS = {
    "mlm.head.dense.weight": "cls.predictions.transform.dense.weight",
    "mlm.head.dense.bias": "cls.predictions.transform.dense.bias",
    "mlm.head.layer_norm.weight": "cls.predictions.transform.LayerNorm.weight",
    "mlm.head.layer_norm.bias": "cls.predictions.transform.LayerNorm.bias",
    "mlm.head.bias": "cls.predictions.bias",
    "nsp.head.weight": "cls.seq_relationship.weight",
    "nsp.head.bias": "cls.seq_relationship.bias",
}
# Keys older checkpoints carry that hold nothing of their own: a position-id buffer, and the decoder that is tied
# to the word embeddings (its bias is cls.predictions.bias again).
_REDUNDANT_KEYS = ("embeddings.position_ids", "cls.predictions.decoder.weight", "cls.predictions.decoder.bias")


def _mlm_head(ours: str, theirs: str, dense: str, layer_norm: str, bias: str) -> dict[str, str]:
    names = {f"{ours}dense.{p}": f"{theirs}{dense}.{p}" for p in ("weight", "bias")}
    names |= {f"{ours}layer_norm.{p}": f"{theirs}{layer_norm}.{p}" for p in ("weight", "bias")}
    return names | {f"{ours}bias": f"{theirs}{bias}"}


@dataclass(frozen=True)
class Adapter:
    """How one family's Hugging Face checkpoints name things."""

    model_type: str
    # Prefix of the backbone's keys in a checkpoint with heads ("bert." in BertForPreTraining).
    prefix: str
    # Our objective whose state-dict layout ``heads`` uses.
    objective: str
    # Hugging Face prefix of distinct layer i.
    layer: str
    layer_modules: dict[str, str]
    # Backbone keys besides embeddings and layers, ours -> theirs: the pooler and the E -> H projection.
    pooler: dict[str, str]
    projection: dict[str, str]
    heads: dict[str, str]
    # Tied decoder weight key (theirs), checked equal to the word embeddings and dropped.
    decoder: str | None
    redundant: tuple[str, ...]
    # Head groups present (first component of our key) -> architecture name.
    architectures: dict[frozenset[str], str] = field(default_factory=dict)


ADAPTERS: dict[str, Adapter] = {
    "bert": Adapter(
        model_type="bert",
        prefix="bert.",
        objective="mlm_nsp",
        layer="encoder.layer.{i}.",
        layer_modules=_LAYER_MODULES,
        pooler=_POOLER_KEYS,
        projection={},
        heads=_HEAD_KEYS,
        decoder="cls.predictions.decoder.weight",
        redundant=_REDUNDANT_KEYS,
        architectures={
            frozenset(): "BertModel",
            frozenset({"mlm"}): "BertForMaskedLM",
            frozenset({"nsp"}): "BertForNextSentencePrediction",
            frozenset({"mlm", "nsp"}): "BertForPreTraining",
        },
    ),
    "roberta": Adapter(
        model_type="roberta",
        prefix="roberta.",
        objective="mlm",
        layer="encoder.layer.{i}.",
        layer_modules=_LAYER_MODULES,
        pooler=_POOLER_KEYS,
        projection={},
        heads=_mlm_head("head.", "lm_head.", "dense", "layer_norm", "bias"),
        decoder="lm_head.decoder.weight",
        redundant=("embeddings.position_ids", "lm_head.decoder.weight", "lm_head.decoder.bias"),
        architectures={frozenset(): "RobertaModel", frozenset({"head"}): "RobertaForMaskedLM"},
    ),
    "albert": Adapter(
        model_type="albert",
        prefix="albert.",
        objective="mlm_sop",
        layer="encoder.albert_layer_groups.{i}.albert_layers.0.",
        layer_modules=_ALBERT_LAYER_MODULES,
        pooler={"pooler.dense.weight": "pooler.weight", "pooler.dense.bias": "pooler.bias"},
        projection={f"embeddings_project.{p}": f"encoder.embedding_hidden_mapping_in.{p}" for p in ("weight", "bias")},
        heads=_mlm_head("mlm.head.", "predictions.", "dense", "LayerNorm", "bias")
        | {f"sop.head.{p}": f"sop_classifier.classifier.{p}" for p in ("weight", "bias")},
        decoder="predictions.decoder.weight",
        redundant=("embeddings.position_ids", "predictions.decoder.weight", "predictions.decoder.bias"),
        architectures={
            frozenset(): "AlbertModel",
            frozenset({"mlm"}): "AlbertForMaskedLM",
            frozenset({"mlm", "sop"}): "AlbertForPreTraining",
        },
    ),
    "electra": Adapter(
        model_type="electra",
        prefix="electra.",
        objective="rtd",
        layer="encoder.layer.{i}.",
        layer_modules=_LAYER_MODULES,
        pooler={},
        projection={f"embeddings_project.{p}": f"embeddings_project.{p}" for p in ("weight", "bias")},
        heads={
            f"discriminator_head.{ours}.{p}": f"discriminator_predictions.{theirs}.{p}"
            for ours, theirs in (("dense", "dense"), ("prediction", "dense_prediction"))
            for p in ("weight", "bias")
        },
        decoder=None,
        redundant=("embeddings.position_ids",),
        architectures={frozenset(): "ElectraModel", frozenset({"discriminator_head"}): "ElectraForPreTraining"},
    ),
}
# ELECTRA's generator folder (ElectraForMaskedLM): its head, ours (in the rtd objective) -> theirs.
_GENERATOR_HEAD = {
    "generator.head.dense.weight": "generator_predictions.dense.weight",
    "generator.head.dense.bias": "generator_predictions.dense.bias",
    "generator.head.layer_norm.weight": "generator_predictions.LayerNorm.weight",
    "generator.head.layer_norm.bias": "generator_predictions.LayerNorm.bias",
    "generator.head.bias": "generator_lm_head.bias",
}
GENERATOR_FOLDER = "generator"


def backbone_key_map(num_layers: int) -> dict[str, str]:
    """Our Bert's state-dict keys -> Hugging Face ``BertModel`` keys."""
    return _backbone_keys(ADAPTERS["bert"], num_layers, projection=False, pooler=True)


def _backbone_keys(adapter: Adapter, num_distinct: int, projection: bool, pooler: bool) -> dict[str, str]:
    names = dict(_EMBEDDING_KEYS)
    if projection:
        names.update(adapter.projection)
    for i in range(num_distinct):
        for ours, theirs in adapter.layer_modules.items():
            for param in ("weight", "bias"):
                names[f"encoder.layers.{i}.{ours}.{param}"] = adapter.layer.format(i=i) + f"{theirs}.{param}"
    if pooler:
        names.update(adapter.pooler)
    return names


def _model_keys(adapter: Adapter, config: BertConfig) -> dict[str, str]:
    with torch.device("meta"):
        model = MODELS.get(config.name).builder(config)
    return _backbone_keys(
        adapter, len(model.encoder.layers), model.embeddings_project is not None, model.pooler is not None
    )


@dataclass
class HFImport:
    # Our config, read from config.json.
    model_config: BertConfig
    # Weights for ``Bert(model_config).load_state_dict`` (or the family's class).
    model_state: dict[str, torch.Tensor]
    # Heads in the layout of ``objective`` (see the module docstring); empty without heads.
    objective_state: dict[str, torch.Tensor]
    # tokenizer.json when the folder has one, else vocab.txt or vocab.json (merges.txt beside it).
    tokenizer_file: Path
    # Keys of model_state that the checkpoint lacks and that hold a fresh BERT init (the pooler of a
    # BertForMaskedLM checkpoint).
    initialized_keys: list[str] = field(default_factory=list)
    # Our objective whose state-dict layout objective_state follows.
    objective: str = "mlm_nsp"
    # Objective config values the checkpoint implies (ELECTRA's generator sizes).
    objective_overrides: dict[str, Any] = field(default_factory=dict)


def import_hf(folder: str | Path, generator_folder: str | Path | None = None) -> HFImport:
    """Read a Hugging Face BERT, RoBERTa, ALBERT or ELECTRA folder, with or without pretraining heads.

    For ELECTRA, ``generator_folder`` (default: ``<folder>/generator`` when it exists) adds the generator to the
    ``rtd`` objective's state. Raises ``CheckpointError`` naming the file and key(s) for a missing file, an
    unsupported config, a corrupt weights file, a missing or unexpected key, or a tensor of the wrong shape.
    """
    folder = Path(folder)
    hf = _read_json(folder / CONFIG_FILE)
    model_type = hf.get("model_type", "bert")
    if model_type not in ADAPTERS:
        raise CheckpointError(
            f"{folder / CONFIG_FILE}: model_type is {model_type!r}; supported: {', '.join(sorted(ADAPTERS))}"
        )
    adapter = ADAPTERS[model_type]
    config = _config_from_hf(adapter, hf, folder / CONFIG_FILE)
    weights_file, state = _read_weights(folder)
    state = _normalize_names(state, adapter.prefix)
    _check_tied_decoder(weights_file, state, adapter.decoder)

    key_map = _model_keys(adapter, config)
    expected = _expected_shapes(config)
    model_state, initialized = {}, []
    for ours, theirs in key_map.items():
        if theirs in state:
            model_state[ours] = _checked(weights_file, theirs, state.pop(theirs), expected[ours])
        elif ours in _POOLER_KEYS:
            initialized.append(ours)
    missing = [theirs for ours, theirs in key_map.items() if ours not in model_state and ours not in _POOLER_KEYS]
    if missing:
        raise CheckpointError(f"{weights_file}: missing key(s) {_some(missing)} that config.json asks for")
    if initialized:
        # A masked-LM checkpoint drops the pooler; a fresh one keeps the model whole (NSP, SOP or classification
        # train it).
        warnings.warn(f"{weights_file} has no pooler; it starts from a fresh BERT init", stacklevel=2)
        model_state.update(_fresh_pooler(config))

    overrides: dict[str, Any] = {}
    objective_state: dict[str, torch.Tensor] = {}
    if model_type == "electra":
        generator_folder = generator_folder or (folder / GENERATOR_FOLDER)
        if (Path(generator_folder) / CONFIG_FILE).is_file():
            objective_state, overrides = _import_generator(Path(generator_folder), config, model_state)
    shapes = _objective_shapes(adapter.objective, config, overrides)
    for ours, theirs in adapter.heads.items():
        if theirs in state:
            objective_state[ours] = _checked(weights_file, theirs, state.pop(theirs), shapes[ours])
    for key in adapter.redundant:
        state.pop(key, None)
    if state:
        raise CheckpointError(f"{weights_file}: unexpected key(s) {_some(sorted(state))}")
    return HFImport(
        config, model_state, objective_state, _tokenizer_file(folder), initialized, adapter.objective, overrides
    )


def import_hf_bert(folder: str | Path) -> HFImport:
    """Read a Hugging Face BERT folder (``BertModel``, ``BertForPreTraining`` or ``BertForMaskedLM``)."""
    _read_config(Path(folder) / CONFIG_FILE)  # refuses other model types with a BERT-specific message
    return import_hf(folder)


def export_hf(
    folder: str | Path,
    model: Bert,
    objective_state: dict[str, torch.Tensor] | None = None,
    tokenizer_file: str | Path | None = None,
    objective_config: Any = None,
) -> None:
    """Write ``model`` (and the heads of ``objective_state``) as a Hugging Face folder of its family.

    Without heads the folder is the family's bare model (``BertModel``, ...); with heads the pretraining class
    they make up (``BertForPreTraining``, ``RobertaForMaskedLM``, ``AlbertForPreTraining``,
    ``ElectraForPreTraining``), whose keys carry the family prefix. An ELECTRA generator in ``objective_state``
    goes to ``<folder>/generator`` as an ``ElectraForMaskedLM``; its head count, which the weights do not show,
    comes from ``objective_config.generator_num_heads`` (the ``rtd`` config the run used) or the rtd default rule.
    The tokenizer file is copied beside them.
    """
    folder = Path(folder)
    config = model.config
    adapter = _adapter_of(config)
    objective_state = dict(objective_state or {})
    generator = {k: v for k, v in objective_state.items() if k.startswith("generator.")}
    if adapter.model_type == "electra":
        objective_state = {k: v for k, v in objective_state.items() if k not in generator}
    heads, groups = _heads_to_hf(objective_state, adapter)
    if groups not in adapter.architectures:
        raise CheckpointError(
            f"objective heads {', '.join(sorted(groups))} make no Hugging Face {adapter.model_type} checkpoint"
        )
    prefix = adapter.prefix if heads else ""
    state = model.state_dict()
    tensors = {prefix + theirs: state[ours] for ours, theirs in _model_keys(adapter, config).items()}
    tensors.update(heads)
    _write(folder, tensors, _config_to_hf(adapter, config, adapter.architectures[groups]), tokenizer_file)
    if generator and adapter.model_type == "electra":
        heads = _get(objective_config, "generator_num_heads")
        _export_generator(folder / GENERATOR_FOLDER, model, generator, tokenizer_file, heads)


def export_hf_bert(
    folder: str | Path,
    model: Bert,
    objective_state: dict[str, torch.Tensor] | None = None,
    tokenizer_file: str | Path | None = None,
) -> None:
    """Write a BERT ``model`` (and MLM/NSP heads) as a Hugging Face BERT folder; see ``export_hf``."""
    export_hf(folder, model, objective_state, tokenizer_file)


# --- configs -------------------------------------------------------------------------------------------------


def _read_json(path: Path) -> dict:
    if not path.is_file():
        raise CheckpointError(f"{path}: not found; a Hugging Face checkpoint folder needs its config.json")
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path}: not readable JSON ({error})") from error


def _read_config(path: Path) -> BertConfig:
    """Our BertConfig from a Hugging Face BERT config.json (other model types are refused)."""
    hf = _read_json(path)
    if hf.get("model_type", "bert") != "bert":
        raise CheckpointError(f"{path}: model_type is {hf['model_type']!r}; expected 'bert'")
    return _config_from_hf(ADAPTERS["bert"], hf, path)


def _config_from_hf(adapter: Adapter, hf: dict, path: Path) -> BertConfig:
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError(
            f"{path}: position_embedding_type is {hf['position_embedding_type']!r}; only 'absolute' is supported"
        )
    act = hf.get("hidden_act", "gelu")
    if act not in _ACT_FROM_HF:
        raise CheckpointError(f"{path}: hidden_act {act!r} is not one of {', '.join(_ACT_FROM_HF)}")
    wanted = dict(_CONFIG_FROM_HF)
    if adapter.model_type in ("albert", "electra"):
        wanted["embedding_size"] = "embedding_size"
    missing = [theirs for theirs in wanted.values() if theirs not in hf]
    if missing:
        raise CheckpointError(f"{path}: missing key(s) {', '.join(missing)}")
    fields = {ours: hf[theirs] for ours, theirs in wanted.items()} | {"hidden_act": _ACT_FROM_HF[act]}
    pad = hf.get("pad_token_id")
    if adapter.model_type == "roberta":
        pad = 1 if pad is None else pad
        return BertConfig(**fields, pad_token_id=pad, position_offset=pad + 1, tokenizer=TokenizerKind.bpe)
    fields["pad_token_id"] = 0 if pad is None else pad
    if adapter.model_type == "albert":
        groups, inner = hf.get("num_hidden_groups", 1), hf.get("inner_group_num", 1)
        if inner != 1 or groups not in (1, fields["num_layers"]):
            raise CheckpointError(
                f"{path}: num_hidden_groups={groups}, inner_group_num={inner}; supported: one group (sharing all) or "
                "one per layer (sharing none), one layer per group"
            )
        return AlbertConfig(**fields, sharing=Sharing.all if groups == 1 else Sharing.none)
    if adapter.model_type == "electra":
        return ElectraConfig(**fields)
    return BertConfig(**fields)


def _adapter_of(config: BertConfig) -> Adapter:
    # A BERT with shifted positions is a RoBERTa: Hugging Face's BERT has no position offset.
    if config.name == "bert" and config.position_offset:
        if config.position_offset != config.pad_token_id + 1:
            raise CheckpointError(
                f"model.position_offset={config.position_offset}: Hugging Face's RoBERTa numbers positions from "
                f"pad_token_id + 1 = {config.pad_token_id + 1}"
            )
        return ADAPTERS["roberta"]
    if config.name not in ADAPTERS:
        raise CheckpointError(f"model {config.name!r} has no Hugging Face adapter here")
    sharing = getattr(getattr(config, "sharing", "all"), "value", getattr(config, "sharing", "all"))
    if sharing not in ("all", "none"):
        raise CheckpointError(f"model.sharing={sharing} has no Hugging Face ALBERT layout (only all and none)")
    return ADAPTERS[config.name]


def _config_to_hf(adapter: Adapter, config: BertConfig, architecture: str) -> dict:
    hf = {theirs: getattr(config, ours) for ours, theirs in _CONFIG_FROM_HF.items()}
    hf.update(
        architectures=[architecture],
        model_type=adapter.model_type,
        hidden_act=_ACT_TO_HF[getattr(config.hidden_act, "value", config.hidden_act)],
        pad_token_id=config.pad_token_id,
        position_embedding_type="absolute",
        tie_word_embeddings=True,
    )
    if adapter.model_type in ("albert", "electra"):
        hf["embedding_size"] = embedding_width(config)
    if adapter.model_type == "albert":
        sharing = getattr(config.sharing, "value", config.sharing)
        hf.update(num_hidden_groups=1 if sharing == "all" else config.num_layers, inner_group_num=1)
    return hf


# --- ELECTRA's generator ---------------------------------------------------------------------------------------


def _import_generator(
    folder: Path, discriminator: BertConfig, model_state: dict[str, torch.Tensor]
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    adapter = ADAPTERS["electra"]
    hf = _read_json(folder / CONFIG_FILE)
    if hf.get("model_type") != "electra":
        raise CheckpointError(f"{folder / CONFIG_FILE}: model_type is {hf.get('model_type')!r}; expected 'electra'")
    config = _config_from_hf(adapter, hf, folder / CONFIG_FILE)
    if (config.vocab_size, embedding_width(config)) != (discriminator.vocab_size, embedding_width(discriminator)):
        raise CheckpointError(
            f"{folder / CONFIG_FILE}: vocab_size/embedding_size {config.vocab_size}/{embedding_width(config)} differ "
            f"from the discriminator's {discriminator.vocab_size}/{embedding_width(discriminator)}; ELECTRA shares them"
        )
    weights_file, state = _read_weights(folder)
    state = _normalize_names(state, adapter.prefix)
    for ours, theirs in _EMBEDDING_KEYS.items():
        value = state.pop(theirs, None)
        if value is not None and not torch.equal(value, model_state[ours]):
            warnings.warn(
                f"{weights_file}: {theirs} differs from the discriminator's; ELECTRA shares the embeddings, the "
                "discriminator's are used",
                stacklevel=3,
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
    shapes = _objective_shapes("rtd", discriminator, overrides)
    names = _generator_keys(config)
    out = {}
    for ours, theirs in names.items():
        if theirs not in state:
            raise CheckpointError(f"{weights_file}: missing key {theirs}")
        out[ours] = _checked(weights_file, theirs, state.pop(theirs), shapes[ours])
    if state:
        raise CheckpointError(f"{weights_file}: unexpected key(s) {_some(sorted(state))}")
    return out, overrides


def _generator_keys(config: BertConfig, prefix: str = "") -> dict[str, str]:
    """Our rtd objective's generator keys -> ElectraForMaskedLM's (embeddings excluded: they are shared)."""
    adapter = ADAPTERS["electra"]
    projection = embedding_width(config) != config.hidden_size
    body = _backbone_keys(adapter, config.num_layers, projection, pooler=False)
    names = {f"generator.{ours}": prefix + theirs for ours, theirs in body.items() if ours not in _EMBEDDING_KEYS}
    return names | _GENERATOR_HEAD


def _get(config: Any, key: str) -> Any:
    if config is None:
        return None
    return config.get(key) if isinstance(config, dict) else getattr(config, key, None)


def _export_generator(
    folder: Path, model: Bert, generator: dict[str, torch.Tensor], tokenizer_file, num_heads: int | None
) -> None:
    first_layer = generator.get("generator.encoder.layers.0.attention.query.weight")
    if first_layer is None:
        raise CheckpointError("objective state has part of the generator; missing generator.encoder.layers.0")
    disc = model.config
    hidden = first_layer.shape[0]
    layers = len({k.split(".")[3] for k in generator if k.startswith("generator.encoder.layers.")})
    config = ElectraConfig(
        **{ours: getattr(disc, ours) for ours in _CONFIG_FROM_HF if ours not in ("hidden_size", "num_layers")}
        | {"num_layers": layers, "hidden_size": hidden, "embedding_size": embedding_width(disc)},
        hidden_act=disc.hidden_act,
        pad_token_id=disc.pad_token_id,
    )
    config.intermediate_size = generator["generator.encoder.layers.0.feed_forward.intermediate.weight"].shape[0]
    config.num_heads = num_heads or max(1, hidden // 64)  # the rtd objective's default rule
    names = _generator_keys(config, ADAPTERS["electra"].prefix)
    absent = [ours for ours in names if ours not in generator]
    if absent or len(names) != len(generator):
        extra = sorted(set(generator) - set(names))
        raise CheckpointError(
            f"generator state does not fit ElectraForMaskedLM (missing {absent[:3]}, extra {extra[:3]})"
        )
    state = model.state_dict()
    tensors = {ADAPTERS["electra"].prefix + theirs: state[ours] for ours, theirs in _EMBEDDING_KEYS.items()}
    tensors.update({theirs: generator[ours] for ours, theirs in names.items()})
    _write(folder, tensors, _config_to_hf(ADAPTERS["electra"], config, "ElectraForMaskedLM"), tokenizer_file)


# --- weights ---------------------------------------------------------------------------------------------------


def _write(folder: Path, tensors: dict[str, torch.Tensor], hf_config: dict, tokenizer_file) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    # safetensors refuses views and shared storage: give every tensor its own contiguous CPU copy.
    tensors = {key: value.detach().to("cpu", copy=True).contiguous() for key, value in tensors.items()}
    save_file(tensors, str(folder / SAFETENSORS_FILE), metadata={"format": "pt"})
    (folder / CONFIG_FILE).write_text(json.dumps(hf_config, indent=2, sort_keys=True) + "\n")
    if tokenizer_file is not None:
        tokenizer_file = Path(tokenizer_file)
        files = [tokenizer_file]
        if tokenizer_file.name == "vocab.json":  # a byte-level BPE vocabulary needs its merges
            files.append(tokenizer_file.with_name("merges.txt"))
        for source in files:
            if source.resolve() != (folder / source.name).resolve():
                shutil.copyfile(source, folder / source.name)


def _read_weights(folder: Path) -> tuple[Path, dict[str, torch.Tensor]]:
    path = folder / SAFETENSORS_FILE
    if path.is_file():
        try:
            return path, load_file(str(path))
        except (SafetensorError, OSError, ValueError) as error:
            raise CheckpointError(f"{path}: not a readable safetensors file ({error})") from error
    path = folder / TORCH_FILE
    if path.is_file():
        return path, read_torch_weights(path)
    raise CheckpointError(f"{folder}: no {SAFETENSORS_FILE} or {TORCH_FILE} found")


def _normalize_names(state: dict[str, torch.Tensor], prefix: str = "bert.") -> dict[str, torch.Tensor]:
    """Drop the family prefix of pretraining checkpoints and rename TF-era LayerNorm ``gamma``/``beta``."""
    normalized = {}
    for key, value in state.items():
        key = key.removeprefix(prefix)
        if ".LayerNorm." in key:
            key = key.replace(".gamma", ".weight").replace(".beta", ".bias")
        normalized[key] = value
    return normalized


def _check_tied_decoder(
    path: Path, state: dict[str, torch.Tensor], decoder_key: str | None = "cls.predictions.decoder.weight"
) -> None:
    decoder = state.get(decoder_key) if decoder_key else None
    words = state.get("embeddings.word_embeddings.weight")
    if decoder is not None and words is not None and not torch.equal(decoder, words):
        raise CheckpointError(
            f"{path}: {decoder_key} differs from the word embeddings; only tied decoders are supported"
        )


def _expected_shapes(config: BertConfig) -> dict[str, torch.Size]:
    with torch.device("meta"):
        return {key: value.shape for key, value in MODELS.get(config.name).builder(config).state_dict().items()}


def _objective_shapes(name: str, config: BertConfig, overrides: dict[str, Any]) -> dict[str, torch.Size]:
    """Parameter shapes of objective ``name`` over a model of ``config`` (built on the meta device)."""
    entry = OBJECTIVES.get(name)
    with torch.device("meta"):
        model = MODELS.get(config.name).builder(config)
        vocab = Vocab(size=config.vocab_size, pad_id=0, unk_id=1, cls_id=2, sep_id=3, mask_id=4)
        objective = entry.builder(entry.config_cls(**overrides), model, vocab)
        return {key: value.shape for key, value in objective.state_dict().items()}


def _checked(path: Path, key: str, value: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    if value.shape != shape:
        raise CheckpointError(f"{path}: {key} has shape {tuple(value.shape)}; config.json implies {tuple(shape)}")
    return value


def _fresh_pooler(config: BertConfig) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(config.hidden_size, config.hidden_size, generator=generator) * config.initializer_range
    return {"pooler.dense.weight": weight, "pooler.dense.bias": torch.zeros(config.hidden_size)}


def _heads_to_hf(
    objective_state: dict[str, torch.Tensor], adapter: Adapter | None = None
) -> tuple[dict[str, torch.Tensor], frozenset[str]]:
    """Heads in Hugging Face names and the head groups present; the plain ``mlm`` objective's ``head.*`` and the
    combined objectives' ``mlm.head.*`` are accepted for every family."""
    adapter = adapter or ADAPTERS["bert"]
    heads = {}
    for key, value in objective_state.items():
        if adapter.objective == "mlm":
            ours = key.removeprefix("mlm.")
        else:
            ours = "mlm." + key if key.startswith("head.") else key
        if ours not in adapter.heads:
            raise CheckpointError(
                f"objective state key {key!r} has no place in a Hugging Face {adapter.model_type.upper()} checkpoint"
            )
        heads[adapter.heads[ours]] = value
    groups = frozenset(ours.split(".")[0] for ours, theirs in adapter.heads.items() if theirs in heads)
    for group in groups:
        wanted = {ours: theirs for ours, theirs in adapter.heads.items() if ours.split(".")[0] == group}
        absent = [ours for ours, theirs in wanted.items() if theirs not in heads]
        if absent:
            raise CheckpointError(f"objective state has part of the {group} head; missing {', '.join(absent)}")
    return heads, groups


def _tokenizer_file(folder: Path) -> Path:
    for name in TOKENIZER_FILES:
        if (folder / name).is_file():
            return folder / name
    raise CheckpointError(f"{folder}: no tokenizer found; expected {' or '.join(TOKENIZER_FILES)}")


def _some(keys: list[str], limit: int = 5) -> str:
    shown = ", ".join(keys[:limit])
    return shown if len(keys) <= limit else f"{shown} and {len(keys) - limit} more"
