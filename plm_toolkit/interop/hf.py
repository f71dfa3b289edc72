"""Hugging Face checkpoint folders: the half of import and export that no family owns.

A folder holds ``config.json``, the weights (``model.safetensors``, or ``pytorch_model.bin`` in older releases) and
a tokenizer (``tokenizer.json``, ``vocab.txt``, or byte-level BPE's ``vocab.json`` + ``merges.txt``). Each family
translates its own names and config keys in its own adapter (``interop/hf_<family>.py``), registered in
``ADAPTERS`` under config.json's ``model_type`` (torchtitan's ``state_dict_adapter.py``); this module reads and
writes folders, dispatches on ``model_type`` and checks every tensor's shape against the model and objective the
config describes. Nothing here imports ``transformers`` or names a family.

    imported = import_hf("/models/gpt2")      # HFImport: our config, backbone and objective-head states
    export_hf("out/", model, objective_state, "tokenizer.json", objective_config)
    export_hf("out/", model, tokenizer_file="tokenizer.json", task_head=head)   # BertForSequenceClassification, ...
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from plm_toolkit.core.atomic import save_safetensors
from plm_toolkit.core.catalog import load_all
from plm_toolkit.core.errors import CheckpointError
from plm_toolkit.core.registry import MODELS, OBJECTIVES
from plm_toolkit.core.weights import read_torch_weights
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.interop.config_check import check_model_config
from plm_toolkit.interop.hf_heads import HeadLayout, TaskHead, take_task_head, task_head_export
from plm_toolkit.interop.hf_tokenizer import ExportedTokenizer, TokenizerLayout, export_tokenizer, special_ids

CONFIG_FILE = "config.json"
SAFETENSORS_FILE = "model.safetensors"
TORCH_FILE = "pytorch_model.bin"
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json")

# Activation names: Hugging Face's gelu is the exact erf form; gelu_new and gelu_pytorch_tanh are the tanh one.
ACT_FROM_HF = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}
ACT_TO_HF = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu"}


@dataclass
class HFImport:
    # Our config, read from config.json.
    model_config: Any
    # Weights for the family's backbone (``MODELS.get(model_config.name).builder(model_config).load_state_dict``).
    model_state: dict[str, torch.Tensor]
    # Heads in the layout of ``objective`` (its ``objective.safetensors`` keys); empty without heads.
    objective_state: dict[str, torch.Tensor]
    # tokenizer.json when the folder has one, else vocab.txt or vocab.json (merges.txt beside it); None where the
    # family allows a folder without one (XLNet's releases hold only spiece.model).
    tokenizer_file: Path | None
    # Keys of model_state that the checkpoint lacks and that hold a fresh init (the pooler of a BertForMaskedLM).
    initialized_keys: list[str] = field(default_factory=list)
    # Our objective whose state-dict layout objective_state follows.
    objective: str = "mlm_nsp"
    # Objective config values the checkpoint implies (ELECTRA's generator sizes, XLNet's reuse_len).
    objective_overrides: dict[str, Any] = field(default_factory=dict)
    # Our key -> the checkpoint's, for messages that name the file's key.
    source_keys: dict[str, str] = field(default_factory=dict, repr=False, compare=False)
    # The task head of a fine-tuned folder (BertForSequenceClassification's classifier, ...); None without one.
    task_head: TaskHead | None = None


@dataclass
class ExportPart:
    """One folder an export writes: ``subfolder`` of the target ("" for itself, ELECTRA's "generator")."""

    subfolder: str
    tensors: dict[str, torch.Tensor]
    hf_config: dict[str, Any]


class Adapter:
    """One family's translation to and from a Hugging Face folder; register subclasses with
    ``@ADAPTERS.register``. ``import_state`` consumes the keys it maps from ``state`` (what is left is an
    unexpected key); ``export`` refuses, with a CheckpointError, anything transformers would load differently."""

    # config.json's model_type.
    model_type: ClassVar[str]
    # Our model family (registry name) it translates.
    family: ClassVar[str]
    # Our objective whose state-dict layout the heads use.
    objective: ClassVar[str]
    # Whether import needs a tokenizer file in the folder.
    tokenizer_required: ClassVar[bool] = True
    # Prefix of the backbone's keys in a checkpoint with heads ("bert." in BertForPreTraining).
    prefix: ClassVar[str] = ""
    # The pooler's keys, ours -> theirs (unprefixed); a task class stores it only where its head reads it.
    pooler: ClassVar[dict[str, str]] = {}
    # What the export's tokenizer files say (``hf_tokenizer.py``).
    tokenizer: ClassVar[TokenizerLayout] = TokenizerLayout()

    def exports(self, config: Any) -> bool:
        """Whether this adapter writes a model of ``config`` (by default: every model of its family)."""
        return config.name == self.family

    def config_from_hf(self, hf: dict, path: Path) -> Any:
        raise NotImplementedError

    def tokenizer_layout(self, task_head: TaskHead | None) -> TokenizerLayout:
        """What the tokenizer of an export (of the task class holding ``task_head``, if any) says."""
        return self.tokenizer

    def task_heads(self, hf: dict) -> dict[str, HeadLayout]:
        """The task heads transformers writes for this family: architecture name -> layout (``hf_heads.py``)."""
        return {}

    def task_config(self, activation: str | None) -> dict[str, Any]:
        """config.json keys under which ``task_heads`` gives the sequence head whose own dense layer applies
        ``activation`` (None: no dense layer); empty where the layouts do not depend on config.json."""
        return {}

    def import_state(
        self, state: dict[str, torch.Tensor], config: Any, weights_file: Path, folder: Path, **options: Any
    ) -> HFImport:
        raise NotImplementedError

    def export(self, model: torch.nn.Module, objective_state: dict[str, torch.Tensor], objective_config: Any):
        """-> list[ExportPart]."""
        raise NotImplementedError


class AdapterRegistry:
    """config.json ``model_type`` -> the family's adapter; filled by the adapter modules (``catalog.load_all``)."""

    def __init__(self) -> None:
        self._adapters: dict[str, Adapter] = {}

    def register(self, cls: type[Adapter]) -> type[Adapter]:
        if cls.model_type in self._adapters:
            raise ValueError(f"Hugging Face adapter {cls.model_type!r} is registered twice")
        self._adapters[cls.model_type] = cls()
        return cls

    def names(self) -> list[str]:
        return sorted(self._adapters)

    def get(self, model_type: str, path: Path) -> Adapter:
        if model_type not in self._adapters:
            raise CheckpointError(f"{path}: model_type is {model_type!r}; supported: {', '.join(self.names())}")
        return self._adapters[model_type]

    def for_config(self, config: Any) -> Adapter:
        for adapter in self._adapters.values():
            if adapter.exports(config):
                return adapter
        families = sorted({adapter.family for adapter in self._adapters.values()})
        raise CheckpointError(
            f"model={config.name} has no Hugging Face adapter (transformers has no such model); families with one: "
            f"{', '.join(families)}"
        )


ADAPTERS = AdapterRegistry()


def import_hf(folder: str | Path, expect: str | None = None, **options: Any) -> HFImport:
    """Read a local Hugging Face folder of any family with an adapter, with or without pretraining heads, or with the
    task head of a fine-tuned release (``HFImport.task_head``).

    ``expect`` refuses any other model_type; ``options`` go to the family's adapter (ELECTRA:
    ``generator_folder``). Raises ``CheckpointError`` naming the file and key(s) for a missing file, a model_type
    without an adapter (listing those that exist), an unsupported config, a corrupt weights file, a missing or
    unexpected key, or a tensor of the wrong shape.
    """
    load_all()
    folder = Path(folder)
    hf = read_json(folder / CONFIG_FILE)
    model_type = hf.get("model_type", "bert")
    if expect is not None and model_type != expect:
        raise CheckpointError(f"{folder / CONFIG_FILE}: model_type is {model_type!r}; expected {expect!r}")
    adapter = ADAPTERS.get(model_type, folder / CONFIG_FILE)
    config = check_model_config(adapter.config_from_hf(hf, folder / CONFIG_FILE), folder / CONFIG_FILE)
    weights_file, state = read_weights(folder)
    head = take_task_head(adapter.task_heads(hf), state, hf, getattr(config, "hidden_size", 0), weights_file)
    imported = adapter.import_state(state, config, weights_file, folder, hf_config=hf, task_head=head, **options)
    if state:
        raise CheckpointError(f"{weights_file}: unexpected key(s) {some(sorted(state))}")
    imported.task_head = head
    names = imported.source_keys
    if head is not None:  # a backbone key the head supplied (RoBERTa's pooler) is named as the file names it
        theirs = {ours: theirs for ours, theirs in head.source_keys.items() if ours not in head.state}
        names |= {key: theirs[name] for key, name in names.items() if name in theirs}
    check_shapes(weights_file, imported.model_state, model_shapes(config), names, missing="missing key(s)")
    heads = objective_shapes(imported.objective, config, imported.objective_overrides)
    check_shapes(weights_file, imported.objective_state, heads, names)
    imported.tokenizer_file = tokenizer_file(folder, required=adapter.tokenizer_required)
    return imported


def export_hf(
    folder: str | Path,
    model: torch.nn.Module,
    objective_state: dict[str, torch.Tensor] | None = None,
    tokenizer_file: str | Path | None = None,
    objective_config: Any = None,
    task_head: TaskHead | None = None,
) -> None:
    """Write ``model`` (and the heads of ``objective_state``, or a fine-tuned ``task_head``) as a Hugging Face
    folder of its family.

    Without heads the folder is the family's bare model (``BertModel``, ``GPT2Model``, ...); with heads the
    pretraining class they make up (``BertForPreTraining``, ``GPT2LMHeadModel``, ...); with a task head the task
    class whose layout holds it (``BertForSequenceClassification``, ...: ``hf_heads.task_head_export``).
    ``objective_config`` is the objective config the run used, for what the weights do not show (ELECTRA's
    generator heads, XLNet's reuse_len). The tokenizer goes beside the weights with what transformers needs to read
    it as the run did, and its special-token ids into config.json (``hf_tokenizer.py``). Writes into ``folder`` as
    it is; plm-export writes atomically.
    """
    load_all()
    folder = Path(folder)
    adapter = ADAPTERS.for_config(model.config)
    if task_head is not None:
        parts = [ExportPart("", *task_head_export(adapter, model, task_head))]
    else:
        parts = adapter.export(model, dict(objective_state or {}), objective_config)
    layout = adapter.tokenizer_layout(task_head)
    max_length = type(model).max_length(model.config)
    for part in parts:
        tokenizer = None
        if tokenizer_file is not None:
            tokenizer = export_tokenizer(tokenizer_file, layout, part.hf_config, max_length)
        ids = tokenizer.ids if tokenizer is not None else special_ids(layout, part.hf_config, None)
        write_folder(folder / part.subfolder, part.tensors, part.hf_config | ids, tokenizer)


# --- folders ---------------------------------------------------------------------------------------------------


def read_json(path: Path) -> dict:
    if not path.is_file():
        raise CheckpointError(f"{path}: not found; a Hugging Face checkpoint folder needs its config.json")
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path}: not readable JSON ({error})") from None
    if not isinstance(found, dict):
        raise CheckpointError(f"{path}: holds a JSON {type(found).__name__}; expected an object of config keys")
    return found


def read_weights(folder: Path) -> tuple[Path, dict[str, torch.Tensor]]:
    path = folder / SAFETENSORS_FILE
    if path.is_file():
        try:
            return path, load_file(str(path))
        except (SafetensorError, OSError, ValueError) as error:
            raise CheckpointError(f"{path}: not a readable safetensors file ({error})") from error
    path = folder / TORCH_FILE
    if path.is_file():
        return path, read_torch_weights(path)
    shards = sorted(p.name for p in folder.glob("*.index.json"))
    sharded = f" ({shards[0]} names weights in several files, which are not read yet)" if shards else ""
    raise CheckpointError(f"{folder}: no {SAFETENSORS_FILE} or {TORCH_FILE} found{sharded}; expected one of them")


def write_folder(
    folder: Path, tensors: dict[str, torch.Tensor], hf_config: dict, tokenizer: ExportedTokenizer | None
) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    # safetensors refuses views and shared storage: give every tensor its own contiguous CPU copy.
    tensors = {key: value.detach().to("cpu", copy=True).contiguous() for key, value in tensors.items()}
    save_safetensors(tensors, folder / SAFETENSORS_FILE, metadata={"format": "pt"})
    (folder / CONFIG_FILE).write_text(json.dumps(hf_config, indent=2, sort_keys=True) + "\n")
    if tokenizer is not None:
        tokenizer.write(folder)


def tokenizer_file(folder: Path, required: bool = True) -> Path | None:
    for name in TOKENIZER_FILES:
        if (folder / name).is_file():
            return folder / name
    if required:
        raise CheckpointError(f"{folder}: no tokenizer found; expected {' or '.join(TOKENIZER_FILES)}")
    return None


# --- names and shapes ------------------------------------------------------------------------------------------


def take(
    state: dict[str, torch.Tensor], names: dict[str, str], path: Path, prefix: str = ""
) -> dict[str, torch.Tensor]:
    """Pop ``prefix + theirs`` for every (ours, theirs) of ``names``; CheckpointError naming the missing ones."""
    missing = [prefix + theirs for theirs in names.values() if prefix + theirs not in state]
    if missing:
        raise CheckpointError(f"{path}: missing key(s) {some(missing)}")
    return {ours: state.pop(prefix + theirs) for ours, theirs in names.items()}


def drop_tied(state: dict[str, torch.Tensor], key: str, embedding: torch.Tensor, path: Path) -> None:
    """Remove a decoder weight that must equal the word embedding (tied), or refuse an untied one."""
    decoder = state.pop(key, None)
    if decoder is not None and not torch.equal(decoder, embedding):
        raise CheckpointError(f"{path}: {key} differs from the word embeddings; only tied decoders are supported")


def model_shapes(config: Any) -> dict[str, torch.Size]:
    with torch.device("meta"):
        return {key: value.shape for key, value in MODELS.get(config.name).builder(config).state_dict().items()}


def objective_shapes(name: str, config: Any, overrides: dict[str, Any]) -> dict[str, torch.Size]:
    """Parameter shapes of objective ``name`` over a model of ``config`` (both built on the meta device)."""
    entry = OBJECTIVES.get(name)
    with torch.device("meta"):
        model = MODELS.get(config.name).builder(config)
        vocab = Vocab(size=config.vocab_size, pad_id=0, unk_id=1, cls_id=2, sep_id=3, mask_id=4)
        objective = entry.builder(entry.config_cls(**overrides), model, vocab)
        return {key: value.shape for key, value in objective.state_dict().items()}


def check_shapes(
    path: Path,
    tensors: dict[str, torch.Tensor],
    expected: dict[str, torch.Size],
    names: dict[str, str],
    missing: str | None = None,
) -> None:
    """Every tensor has the shape the config implies; with ``missing``, every expected key is present. Messages
    name the checkpoint's keys (``names``: ours -> theirs)."""
    for key, value in tensors.items():
        if key not in expected:
            raise CheckpointError(f"{path}: {names.get(key, key)} has no place in the model config.json describes")
        if value.shape != expected[key]:
            raise CheckpointError(
                f"{path}: {names.get(key, key)} has shape {tuple(value.shape)}; config.json implies "
                f"{tuple(expected[key])}"
            )
    absent = [names.get(key, key) for key in expected if key not in tensors]
    if missing and absent:
        raise CheckpointError(f"{path}: {missing} {some(absent)}")


def config_values(hf: dict, names: dict[str, str], path: Path) -> dict[str, Any]:
    """Our field -> config.json value for every (ours, theirs) of ``names``, each a number (the sizes, dropouts and
    epsilons that adapters compute with); CheckpointError for missing keys or other values."""
    missing = [theirs for theirs in names.values() if theirs not in hf]
    if missing:
        raise CheckpointError(f"{path}: missing key(s) {', '.join(missing)}")
    for theirs in names.values():
        value = hf[theirs]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise CheckpointError(f"{path}: {theirs} is {json.dumps(value)}; expected a number")
    return {ours: hf[theirs] for ours, theirs in names.items()}


def activation_from_hf(hf: dict, key: str, path: Path, table: dict[str, str] = ACT_FROM_HF) -> str:
    act = hf.get(key, "gelu")
    if act not in table:
        raise CheckpointError(f"{path}: {key} {act!r} is not one of {', '.join(table)}")
    return table[act]


def some(keys: list[str], limit: int = 5) -> str:
    shown = ", ".join(keys[:limit])
    return shown if len(keys) <= limit else f"{shown} and {len(keys) - limit} more"
