"""Reading a checkpoint folder, whatever its kind: a ``plm-train`` checkpoint, a local Hugging Face folder, or another
format a family registers (``register_format``: ELMo's bilm-tf folders). ``read_checkpoint`` is the one place that
tells which a folder holds; every command that loads a model (``interop/pretrained.py``) and continued pretraining
(``training/continued.py``) call it, and ask the ``Checkpoint`` it returns for the objective's heads.

A ``plm-train`` checkpoint is rebuilt through the model registry from the ``model`` section of its ``config.yaml`` (a
fine-tuned checkpoint keeps the backbone's under ``backbone``). A Hugging Face folder goes through ``interop/hf.py``'s
``import_hf``, which dispatches on ``config.json``'s ``model_type`` to the family's adapter; nothing here names a
family. A tokenizer is read once and checked against the weights it comes with (``TokenizerFile``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from safetensors.torch import load_file
from tokenizers import Tokenizer
from torch import nn

from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core import registry
from plm_toolkit.core.catalog import load_all
from plm_toolkit.core.errors import CheckpointError, ConfigError
from plm_toolkit.core.weights import check_values, load_weights
from plm_toolkit.data.tokenization.template import Template, template_of
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
    path = checkpoint_dir / ckpt.CONFIG_FILE
    return model_config_from(read_config_yaml(path), path)


def model_config_from(saved: DictConfig, path: Path):
    """The typed backbone config in ``saved``, the config.yaml at ``path`` as ``read_config_yaml`` read it."""
    load_all()
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


@dataclass
class Checkpoint:
    """What a checkpoint folder holds (``read_checkpoint``): the backbone with its weights, its tokenizer, and where
    the objective's heads are."""

    # The folder the weights came from (a plm-train run's step folder) and its kind: "plm_train",
    # "hf:<model_type>" or a registered format's name.
    source: Path
    kind: str
    model: nn.Module
    # Checked against the model (``TokenizerFile``) where the folder keeps it as a file.
    tokenizer: Tokenizer
    # That file; None where a format builds the tokenizer (bilm-tf's vocabulary).
    tokenizer_file: Path | None
    # What else the kind holds: a plm-train checkpoint's config.yaml, a Hugging Face folder's import, the format.
    saved: DictConfig | None = None
    imported: HFImport | None = None
    fmt: CheckpointFormat | None = None

    @cached_property
    def _format_heads(self) -> tuple[str | None, dict[str, torch.Tensor]]:
        return self.fmt.heads(self.source) if self.fmt is not None and self.fmt.heads is not None else (None, {})

    @property
    def objective(self) -> str | None:
        """The objective whose layout the folder's heads follow (a plm-train run's, the one a Hugging Face
        architecture implies, a format's), or None."""
        if self.saved is not None:
            section = self.saved.get("objective")
            return section.name if section is not None and "name" in section else None
        if self.imported is not None:
            return self.imported.objective
        return self._format_heads[0]

    def objective_values(self) -> dict[str, Any]:
        """The objective's config as the folder gives it: a plm-train run's section, the values a Hugging Face
        config implies (ELECTRA's generator sizes)."""
        if self.saved is not None:
            return OmegaConf.to_container(self.saved.objective, resolve=True) if self.objective else {}
        return dict(self.imported.objective_overrides) if self.imported is not None else {}

    def objective_config(self) -> Any:
        """The objective's typed config, or None where the folder names no registered objective."""
        name = self.objective
        if name not in registry.OBJECTIVES:
            return None
        if self.saved is not None:
            return typed_objective_config(name, self.saved.objective)
        return registry.OBJECTIVES.get(name).config_cls(**self.objective_values())

    def objective_state(self) -> dict[str, torch.Tensor]:
        """The heads' weights as the folder stores them, in the layout of ``objective``."""
        if self.saved is not None:
            path = self.source / ckpt.OBJECTIVE_FILE
            return load_file(str(path)) if self.objective is not None and path.is_file() else {}
        if self.imported is not None:
            return dict(self.imported.objective_state)
        return self._format_heads[1]

    def load_objective(self, objective: nn.Module) -> None:
        """The heads into ``objective`` (built for ``self.objective``): a plm-train checkpoint's objective.safetensors
        checked as the model's weights are (``load_objective_file``), another kind's as they come."""
        if self.saved is not None:
            load_objective_file(self.source / ckpt.OBJECTIVE_FILE, objective)
        elif state := self.objective_state():
            objective.load_state_dict(state)


def read_checkpoint(path: str | Path, key: str = "model.checkpoint", **options: Any) -> Checkpoint:
    """The checkpoint at ``path``: a plm-train checkpoint or run directory, a local Hugging Face folder (``options``
    go to its import: ELECTRA's ``generator_folder``), or a registered format; CheckpointError naming ``key`` (the
    setting that gave the path) when it is none of them."""
    path = Path(path).expanduser()
    if not path.exists():
        raise CheckpointError(f"{key}={path}: no such file or directory")
    load_all()  # the families' adapters register their formats
    step_dir = ckpt.plm_checkpoint_dir(path)
    if step_dir is not None:
        return _plm_checkpoint(step_dir)
    if (path / "config.json").is_file():
        model, tokenizer_file, imported = import_hf_backbone(path, **options)
        kind = f"hf:{json.loads((path / 'config.json').read_text()).get('model_type')}"
        tokenizer = TokenizerFile.read(tokenizer_file)
        tokenizer.check(model)
        return Checkpoint(path, kind, model, tokenizer.tokenizer, tokenizer_file, imported=imported)
    fmt = next((fmt for fmt in FORMATS if fmt.detect(path)), None)
    if fmt is None:
        kinds = [
            f"a plm-train checkpoint ({ckpt.MODEL_FILE} + {ckpt.CONFIG_FILE})",
            "a Hugging Face folder (config.json)",
        ]
        kinds += [known.description for known in FORMATS]
        raise CheckpointError(f"{key}={path}: not {', '.join(kinds[:-1])} or {kinds[-1]}")
    model, tokenizer = fmt.load(path)
    return Checkpoint(path, fmt.name, model, tokenizer, None, fmt=fmt)


def _plm_checkpoint(step_dir: Path) -> Checkpoint:
    """A plm-train checkpoint, read in one pass (its config.yaml, the model it describes, its tokenizer, its weights)
    before the tokenizer is checked against the model."""
    config_file = step_dir / ckpt.CONFIG_FILE
    saved = read_config_yaml(config_file)
    config = model_config_from(saved, config_file)
    with _inconsistent(config_file):
        model = registry.MODELS.get(config.name).builder(config)
    tokenizer_file = step_dir / ckpt.TOKENIZER_FILE
    if not tokenizer_file.is_file():
        raise CheckpointError(f"{step_dir}: no {ckpt.TOKENIZER_FILE}; the checkpoint needs its tokenizer")
    tokenizer = TokenizerFile.read(tokenizer_file)
    load_weights(model, step_dir / ckpt.MODEL_FILE)
    tokenizer.check(model)
    return Checkpoint(step_dir, "plm_train", model, tokenizer.tokenizer, tokenizer_file, saved=saved)


@dataclass(frozen=True)
class TokenizerFile:
    """A checkpoint's tokenizer, read from its file with what the checks against the weights need of it."""

    path: Path
    tokenizer: Tokenizer
    # Its highest id + 1 (``vocabulary_size``) and where it puts special tokens around one text.
    size: int
    template: Template

    @classmethod
    def read(cls, path: Path) -> TokenizerFile:
        tokenizer = load_tokenizer(path)
        return cls(path, tokenizer, vocabulary_size(tokenizer), template_of(tokenizer, pair=False))

    def check(self, model: nn.Module) -> None:
        """Refuse a tokenizer that does not belong to ``model``'s weights: more ids than embedding rows
        (``check_vocabulary``), special tokens where the family does not read them (``check_tokenizer_roles``)."""
        try:
            rows = model.input_embeddings.num_embeddings
        except (NotImplementedError, AttributeError):  # ELMo reads characters; adaptive embeddings have no one table
            return
        check_vocabulary(rows, self.size, self.path)
        family = getattr(getattr(model, "config", None), "name", "")
        check_tokenizer_roles(family, self.tokenizer, self.template, self.path)


def load_plm_checkpoint(checkpoint_dir: Path) -> tuple[nn.Module, Path]:
    """A plm-train checkpoint's backbone with its weights, and its tokenizer's file (checked against them)."""
    found = _plm_checkpoint(checkpoint_dir)
    return found.model, found.tokenizer_file


def check_vocabulary(rows: int, size: int, tokenizer_file: Path) -> None:
    """Refuse a tokenizer of ``size`` ids for a model of ``rows`` embedding rows when it has more: its higher ids
    would index outside them (a tokenizer.json from another checkpoint). Fewer is fine: vocabularies are often padded
    to a round size."""
    if size > rows:
        raise CheckpointError(
            f"{tokenizer_file}: {size} tokens, but the model's word embeddings have {rows} rows; expected at most "
            f"{rows} (the tokenizer of the checkpoint these weights came from)"
        )


def typed_objective_config(name: str, section):
    schema = OmegaConf.structured(registry.OBJECTIVES.get(name).config_cls)
    return OmegaConf.to_object(OmegaConf.merge(schema, section))


def load_objective_file(path: Path, objective: nn.Module) -> None:
    """A plm-train checkpoint's objective.safetensors into ``objective``, checked as the model's weights are (every
    tensor present, none extra, finite); an objective without parameters may come without the file."""
    if path.is_file() or any(True for _ in objective.parameters()):
        load_weights(objective, path)
