"""Reading a checkpoint folder, whatever its kind: a ``plm-train`` checkpoint, a local Hugging Face folder, or another
format a family registers (``register_format``: ELMo's bilm-tf folders).

A ``plm-train`` checkpoint is rebuilt through the model registry from the ``model`` section of its ``config.yaml`` (a
fine-tuned checkpoint keeps the backbone's under ``backbone``). A Hugging Face folder goes through ``interop/hf.py``'s
``import_hf``, which dispatches on ``config.json``'s ``model_type`` to the family's adapter; nothing here names a
family. A tokenizer is checked against the weights it comes with (``check_vocabulary``).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from tokenizers import Tokenizer
from torch import nn

from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core import registry
from plm_toolkit.core.catalog import load_all
from plm_toolkit.core.errors import CheckpointError, ConfigError
from plm_toolkit.core.weights import check_values, load_weights
from plm_toolkit.data.tokenization.tokenizer import load_tokenizer
from plm_toolkit.data.tokenization.vocabulary_files import vocabulary_size
from plm_toolkit.interop.config_check import check_model_config
from plm_toolkit.interop.hf import SAFETENSORS_FILE, TORCH_FILE, HFImport, import_hf
from plm_toolkit.interop.tokenizer_roles import check_tokenizer_roles


def import_hf_backbone(folder: Path, **options) -> tuple[nn.Module, Path, HFImport]:
    """The backbone of a local Hugging Face folder with its weights, its tokenizer file and the import. Values that
    do not make a model (heads that do not divide the width, a word where a number belongs) are reported against
    config.json."""
    with _inconsistent(folder / "config.json"):
        imported = import_hf(folder, **options)
        config = imported.model_config
        OmegaConf.structured(config)  # checks every value against the config's types
        model = registry.MODELS.get(config.name).builder(config)
    if imported.tokenizer_file is None:
        raise CheckpointError(
            f"{folder}: no tokenizer.json (a released XLNet folder may hold only spiece.model); save one with "
            "transformers' <Family>TokenizerFast(...).save_pretrained(folder)"
        )
    weights = folder / (SAFETENSORS_FILE if (folder / SAFETENSORS_FILE).is_file() else TORCH_FILE)
    check_values(weights, imported.model_state, model, imported.source_keys)
    model.load_state_dict(imported.model_state)
    return model, imported.tokenizer_file, imported


@contextmanager
def _inconsistent(path: Path):
    """Errors that building a model from a saved config raises, as one CheckpointError naming that file."""
    try:
        yield
    except (ConfigError, ValueError, TypeError, OmegaConfBaseException) as err:
        if isinstance(err, CheckpointError):
            raise
        detail = " ".join(str(err).split("\n")[0].split())
        key = getattr(err, "full_key", None)
        raise CheckpointError(f"{path}: inconsistent config ({f'{key}: ' if key else ''}{detail})") from None


@dataclass(frozen=True)
class CheckpointFormat:
    """A checkpoint format other than plm-train's and Hugging Face's (bilm-tf's ELMo), registered by its family's
    adapter module with ``register_format``."""

    name: str
    # What a folder of this format holds, for messages.
    description: str
    # Whether ``path`` holds this format.
    detect: Callable[[Path], bool]
    # The backbone with its weights, and its tokenizer.
    load: Callable[[Path], tuple[nn.Module, Tokenizer]]
    # The objective its heads belong to and their state where the folder has them (plm-train model.checkpoint).
    heads: Callable[[Path], tuple[str, dict[str, torch.Tensor]]] | None = None


FORMATS: list[CheckpointFormat] = []


def register_format(fmt: CheckpointFormat) -> None:
    FORMATS.append(fmt)


def model_config_of(checkpoint_dir: Path):
    """The typed backbone config saved in a checkpoint's config.yaml."""
    load_all()
    path = checkpoint_dir / ckpt.CONFIG_FILE
    saved = read_config_yaml(path)
    section = saved.get("backbone") or saved.get("model")
    if section is None or "name" not in section:
        raise CheckpointError(f"{path}: no model section with a family name; is this a plm-train checkpoint?")
    if section.name not in registry.MODELS:
        raise CheckpointError(
            f"{path}: model.name={section.name} is not a known family; known: {', '.join(registry.MODELS.names())}"
        )
    schema = OmegaConf.structured(registry.MODELS.get(section.name).config_cls)
    with _inconsistent(path):
        config = OmegaConf.to_object(OmegaConf.merge(schema, section))
    return check_model_config(config, path)


def read_config_yaml(path: Path) -> DictConfig:
    """A checkpoint's config.yaml; a file that is not a YAML mapping is named with its line and column."""
    try:
        saved = OmegaConf.load(path)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise CheckpointError(f"{path}{where}: not valid YAML ({problem})") from None
    except UnicodeDecodeError as err:
        raise CheckpointError(f"{path}: not UTF-8 text (byte {err.start}); expected a YAML mapping") from None
    except OSError as err:
        if err.strerror is None:  # OmegaConf's own refusal of a scalar document: "Invalid loaded object type: int"
            raise CheckpointError(f"{path}: {err}; expected a mapping with a model section") from None
        raise CheckpointError(f"{path}: unreadable ({err.strerror})") from None
    if not isinstance(saved, DictConfig):
        raise CheckpointError(f"{path}: expected a mapping with a model section; is this a plm-train checkpoint?")
    return saved


def load_plm_checkpoint(checkpoint_dir: Path) -> tuple[nn.Module, Path]:
    config = model_config_of(checkpoint_dir)
    with _inconsistent(checkpoint_dir / ckpt.CONFIG_FILE):
        model = registry.MODELS.get(config.name).builder(config)
    load_weights(model, checkpoint_dir / ckpt.MODEL_FILE)
    tokenizer = checkpoint_dir / ckpt.TOKENIZER_FILE
    if not tokenizer.is_file():
        raise CheckpointError(f"{checkpoint_dir}: no {ckpt.TOKENIZER_FILE}; the checkpoint needs its tokenizer")
    check_vocabulary(model, load_tokenizer(tokenizer), tokenizer)
    return model, tokenizer


def check_vocabulary(model: nn.Module, tokenizer: Tokenizer, tokenizer_file: Path) -> None:
    """Refuse a tokenizer with more ids than the model has embedding rows: its higher ids would index outside them
    (a tokenizer.json from another checkpoint). Fewer is fine: vocabularies are often padded to a round size."""
    try:
        rows = model.input_embeddings.num_embeddings
    except (NotImplementedError, AttributeError):  # ELMo reads characters; adaptive embeddings have no one table
        return
    size = vocabulary_size(tokenizer)
    if size > rows:
        raise CheckpointError(
            f"{tokenizer_file}: {size} tokens, but the model's word embeddings have {rows} rows; expected at most "
            f"{rows} (the tokenizer of the checkpoint these weights came from)"
        )
    check_tokenizer_roles(getattr(getattr(model, "config", None), "name", ""), tokenizer, tokenizer_file)


def typed_objective_config(name: str, section):
    schema = OmegaConf.structured(registry.OBJECTIVES.get(name).config_cls)
    return OmegaConf.to_object(OmegaConf.merge(schema, section))


def load_objective_file(path: Path, objective: nn.Module) -> None:
    """A plm-train checkpoint's objective.safetensors into ``objective``, checked as the model's weights are (every
    tensor present, none extra, finite); an objective without parameters may come without the file."""
    if path.is_file() or any(True for _ in objective.parameters()):
        load_weights(objective, path)
