"""Import and export of Hugging Face BERT checkpoint folders.

A Hugging Face BERT folder holds ``config.json``, the weights (``model.safetensors``, or ``pytorch_model.bin`` in
older releases) and a tokenizer (``tokenizer.json`` and/or ``vocab.txt``). Parameter names are translated by a
plain table; nothing here imports ``transformers``.

Objective heads travel in our objectives' layout (``objectives/mlm.py``, ``objectives/nsp.py``):

===============================  =====================================
ours (objective ``mlm_nsp``)      Hugging Face (``BertForPreTraining``)
===============================  =====================================
``mlm.head.dense.*``              ``cls.predictions.transform.dense.*``
``mlm.head.layer_norm.*``         ``cls.predictions.transform.LayerNorm.*``
``mlm.head.bias``                 ``cls.predictions.bias``
``nsp.head.*``                    ``cls.seq_relationship.*``
===============================  =====================================

The MLM decoder weight is tied to the word embeddings, so it has no key of its own. The plain ``mlm`` objective
keeps the same head without the ``mlm.`` prefix (``head.dense.*``, ``head.layer_norm.*``, ``head.bias``); export
accepts either layout, import always returns the ``mlm_nsp`` one.
"""

from __future__ import annotations

import json
import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from plm_toolkit.errors import CheckpointError
from plm_toolkit.models.bert import Bert, BertConfig

CONFIG_FILE = "config.json"
SAFETENSORS_FILE = "model.safetensors"
TORCH_FILE = "pytorch_model.bin"
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt")

# Activation names: Hugging Face's gelu is the exact erf form; gelu_new and gelu_pytorch_tanh are the tanh one.
_ACT_FROM_HF = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}
_ACT_TO_HF = {"gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh", "relu": "relu"}

# Our BertConfig field <- Hugging Face config.json key.
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

# Backbone names, ours -> Hugging Face's (without the "bert." prefix of the pretraining checkpoints).
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


def backbone_key_map(num_layers: int) -> dict[str, str]:
    """Our Bert's state-dict keys -> Hugging Face ``BertModel`` keys."""
    names = dict(_EMBEDDING_KEYS)
    for i in range(num_layers):
        for ours, theirs in _LAYER_MODULES.items():
            for param in ("weight", "bias"):
                names[f"encoder.layers.{i}.{ours}.{param}"] = f"encoder.layer.{i}.{theirs}.{param}"
    names.update(_POOLER_KEYS)
    return names


@dataclass
class HFImport:
    # Our config, read from config.json.
    model_config: BertConfig
    # Weights for ``Bert(model_config).load_state_dict``.
    model_state: dict[str, torch.Tensor]
    # Heads in the ``mlm_nsp`` objective's layout (see the module docstring); empty without heads.
    objective_state: dict[str, torch.Tensor]
    # tokenizer.json when the folder has one, else vocab.txt.
    tokenizer_file: Path
    # Keys of model_state that the checkpoint lacks and that hold a fresh BERT init (the pooler of a
    # BertForMaskedLM checkpoint).
    initialized_keys: list[str] = field(default_factory=list)


def import_hf_bert(folder: str | Path) -> HFImport:
    """Read a Hugging Face BERT folder (``BertModel``, ``BertForPreTraining`` or ``BertForMaskedLM``).

    Raises ``CheckpointError`` naming the file and key(s) for a missing file, an unsupported config, a corrupt
    weights file, a missing or unexpected key, or a tensor of the wrong shape.
    """
    folder = Path(folder)
    config = _read_config(folder / CONFIG_FILE)
    weights_file, state = _read_weights(folder)
    state = _normalize_names(state)
    _check_tied_decoder(weights_file, state)

    expected = _expected_shapes(config)
    key_map = backbone_key_map(config.num_layers)
    model_state, initialized = {}, []
    for ours, theirs in key_map.items():
        if theirs in state:
            model_state[ours] = _checked(weights_file, theirs, state.pop(theirs), expected[ours])
        elif ours in _POOLER_KEYS:
            initialized.append(ours)
    missing = [theirs for ours, theirs in key_map.items() if ours not in model_state and ours not in _POOLER_KEYS]
    if missing:
        raise CheckpointError(f"{weights_file}: missing key(s) {_some(missing)}")
    if initialized:
        # BertForMaskedLM drops the pooler; a fresh one keeps the model whole (NSP or classification train it).
        warnings.warn(f"{weights_file} has no pooler; it starts from a fresh BERT init", stacklevel=2)
        model_state.update(_fresh_pooler(config))

    objective_state = {}
    for ours, theirs in _HEAD_KEYS.items():
        if theirs in state:
            objective_state[ours] = _checked(weights_file, theirs, state.pop(theirs), _head_shape(config, ours))
    for key in _REDUNDANT_KEYS:
        state.pop(key, None)
    if state:
        raise CheckpointError(f"{weights_file}: unexpected key(s) {_some(sorted(state))}")
    return HFImport(config, model_state, objective_state, _tokenizer_file(folder), initialized)


def export_hf_bert(
    folder: str | Path,
    model: Bert,
    objective_state: dict[str, torch.Tensor] | None = None,
    tokenizer_file: str | Path | None = None,
) -> None:
    """Write ``model`` (and MLM/NSP heads from ``objective_state``) as a Hugging Face BERT folder.

    Without heads the folder is a ``BertModel``; with an MLM head a ``BertForMaskedLM`` (plus NSP:
    ``BertForPreTraining``), whose keys carry the ``bert.`` prefix. The tokenizer file is copied beside them.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = model.config
    heads = _heads_to_hf(objective_state or {})
    prefix = "bert." if heads else ""
    state = model.state_dict()
    tensors = {prefix + theirs: state[ours] for ours, theirs in backbone_key_map(config.num_layers).items()}
    tensors.update(heads)
    # safetensors refuses views and shared storage: give every tensor its own contiguous CPU copy.
    tensors = {key: value.detach().to("cpu", copy=True).contiguous() for key, value in tensors.items()}
    save_file(tensors, str(folder / SAFETENSORS_FILE), metadata={"format": "pt"})

    has_mlm, has_nsp = "cls.predictions.bias" in heads, "cls.seq_relationship.weight" in heads
    architecture = {
        (True, True): "BertForPreTraining",
        (True, False): "BertForMaskedLM",
        (False, True): "BertForNextSentencePrediction",
        (False, False): "BertModel",
    }[has_mlm, has_nsp]
    hf_config = {theirs: getattr(config, ours) for ours, theirs in _CONFIG_FROM_HF.items()}
    hf_config.update(
        architectures=[architecture],
        model_type="bert",
        hidden_act=_ACT_TO_HF[getattr(config.hidden_act, "value", config.hidden_act)],
        pad_token_id=config.pad_token_id,
        position_embedding_type="absolute",
        tie_word_embeddings=True,
    )
    (folder / CONFIG_FILE).write_text(json.dumps(hf_config, indent=2, sort_keys=True) + "\n")
    if tokenizer_file is not None:
        tokenizer_file = Path(tokenizer_file)
        if tokenizer_file.resolve() != (folder / tokenizer_file.name).resolve():
            shutil.copyfile(tokenizer_file, folder / tokenizer_file.name)


def _read_config(path: Path) -> BertConfig:
    if not path.is_file():
        raise CheckpointError(f"{path}: not found; a Hugging Face BERT folder needs its config.json")
    try:
        hf = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path}: not readable JSON ({error})") from error
    if hf.get("model_type", "bert") != "bert":
        raise CheckpointError(f"{path}: model_type is {hf['model_type']!r}; expected 'bert'")
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError(
            f"{path}: position_embedding_type is {hf['position_embedding_type']!r}; only 'absolute' is supported"
        )
    act = hf.get("hidden_act", "gelu")
    if act not in _ACT_FROM_HF:
        raise CheckpointError(f"{path}: hidden_act {act!r} is not one of {', '.join(_ACT_FROM_HF)}")
    missing = [theirs for theirs in _CONFIG_FROM_HF.values() if theirs not in hf]
    if missing:
        raise CheckpointError(f"{path}: missing key(s) {', '.join(missing)}")
    fields = {ours: hf[theirs] for ours, theirs in _CONFIG_FROM_HF.items()}
    pad_token_id = hf.get("pad_token_id")
    return BertConfig(**fields, hidden_act=_ACT_FROM_HF[act], pad_token_id=0 if pad_token_id is None else pad_token_id)


def _read_weights(folder: Path) -> tuple[Path, dict[str, torch.Tensor]]:
    path = folder / SAFETENSORS_FILE
    if path.is_file():
        try:
            return path, load_file(str(path))
        except (SafetensorError, OSError, ValueError) as error:
            raise CheckpointError(f"{path}: not a readable safetensors file ({error})") from error
    path = folder / TORCH_FILE
    if path.is_file():
        try:
            # weights_only: a pickle may run code; only plain tensors are accepted.
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as error:  # torch.load raises many kinds; all mean "unusable file"
            raise CheckpointError(f"{path}: not a readable PyTorch weights file ({error})") from error
        if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
            raise CheckpointError(f"{path}: expected a dict of tensors (a state dict)")
        return path, state
    raise CheckpointError(f"{folder}: no {SAFETENSORS_FILE} or {TORCH_FILE} found")


def _normalize_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Drop the ``bert.`` prefix of pretraining checkpoints and rename TF-era LayerNorm ``gamma``/``beta``."""
    normalized = {}
    for key, value in state.items():
        key = key.removeprefix("bert.")
        if ".LayerNorm." in key:
            key = key.replace(".gamma", ".weight").replace(".beta", ".bias")
        normalized[key] = value
    return normalized


def _check_tied_decoder(path: Path, state: dict[str, torch.Tensor]) -> None:
    decoder = state.get("cls.predictions.decoder.weight")
    words = state.get("embeddings.word_embeddings.weight")
    if decoder is not None and words is not None and not torch.equal(decoder, words):
        raise CheckpointError(
            f"{path}: cls.predictions.decoder.weight differs from the word embeddings; only tied decoders are supported"
        )


def _expected_shapes(config: BertConfig) -> dict[str, torch.Size]:
    with torch.device("meta"):
        return {key: value.shape for key, value in Bert(config).state_dict().items()}


def _head_shape(config: BertConfig, key: str) -> torch.Size:
    hidden = config.hidden_size
    shapes = {
        "mlm.head.dense.weight": (hidden, hidden),
        "mlm.head.bias": (config.vocab_size,),
        "nsp.head.weight": (2, hidden),
        "nsp.head.bias": (2,),
    }
    return torch.Size(shapes.get(key, (hidden,)))


def _checked(path: Path, key: str, value: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    if value.shape != shape:
        raise CheckpointError(f"{path}: {key} has shape {tuple(value.shape)}; config.json implies {tuple(shape)}")
    return value


def _fresh_pooler(config: BertConfig) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(config.hidden_size, config.hidden_size, generator=generator) * config.initializer_range
    return {"pooler.dense.weight": weight, "pooler.dense.bias": torch.zeros(config.hidden_size)}


def _heads_to_hf(objective_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    heads = {}
    for key, value in objective_state.items():
        ours = "mlm." + key if key.startswith("head.") else key  # the plain mlm objective's layout
        if ours not in _HEAD_KEYS:
            raise CheckpointError(f"objective state key {key!r} has no place in a Hugging Face BERT checkpoint")
        heads[_HEAD_KEYS[ours]] = value
    for group in ("mlm.", "nsp."):
        wanted = {theirs for ours, theirs in _HEAD_KEYS.items() if ours.startswith(group)}
        if heads.keys() & wanted and not wanted <= heads.keys():
            absent = [ours for ours, theirs in _HEAD_KEYS.items() if theirs in wanted - heads.keys()]
            raise CheckpointError(f"objective state has part of the {group[:-1]} head; missing {', '.join(absent)}")
    return heads


def _tokenizer_file(folder: Path) -> Path:
    for name in TOKENIZER_FILES:
        if (folder / name).is_file():
            return folder / name
    raise CheckpointError(f"{folder}: no tokenizer found; expected {' or '.join(TOKENIZER_FILES)}")


def _some(keys: list[str], limit: int = 5) -> str:
    shown = ", ".join(keys[:limit])
    return shown if len(keys) <= limit else f"{shown} and {len(keys) - limit} more"
