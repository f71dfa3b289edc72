"""ELMo's checkpoint adapter: bilm-tf's ``options.json`` + HDF5 weights, the format of every released ELMo.

    model = import_bilm_tf("/models/elmo_small")       # a folder with *options.json and *weights*.hdf5
    export_bilm_tf("/tmp/out", model, tokenizer)       # writes options.json + weights.hdf5 (+ vocab.txt) back

The HDF5 layout (bilm-tf's ``bin/dump_weights.py``; TF matrices are [in, out]):
  char_embed                                  (261, E)       characters 0..260; our row 0 (masking) is zero
  CNN/W_cnn_i, CNN/b_cnn_i                    (1, w, E, n)   conv2d filters of width w
  CNN_high_k/{W,b}_{carry,transform}                         highway k, bilm-tf's gate convention as ours
  CNN_proj/W_proj, CNN_proj/b_proj            (F, H)         absent when F == H
  RNN_d/RNN/MultiRNNCell/Cell{l}/LSTMCell/    d = 0 forward, 1 backward; RNN_d/RNN/LSTMCell with one layer
      W_0 (I + H, 4C)  [input; state] -> gates in TF's order (i, j, f, o)
      B   (4C,)        without TF's forget_bias of 1.0, which the cell adds at run time
      W_P_0 (C, H)     the projection, absent when C == H
Reading needs ``h5py`` (``pip install 'plm_toolkit[elmo]'``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer

from plm_toolkit.core.errors import CheckpointError, ConfigError
from plm_toolkit.data.tokenization.characters import NUM_CHARACTER_IDS
from plm_toolkit.data.tokenization.word_vocabulary import read_bilm_vocab, word_tokenizer, write_bilm_vocab
from plm_toolkit.interop.checkpoint_reader import CheckpointFormat, register_format
from plm_toolkit.models.elmo import CnnActivation, Elmo, ElmoConfig

OPTIONS_FILE, WEIGHTS_FILE, VOCAB_FILE = "options.json", "weights.hdf5", "vocab.txt"
# TF's LSTMCell adds this to the forget gate's pre-activation; PyTorch-style cells keep it in the bias.
TF_FORGET_BIAS = 1.0


def h5py_module():
    try:
        import h5py
    except ImportError:
        raise CheckpointError("reading or writing HDF5 needs h5py: pip install 'plm_toolkit[elmo]'") from None
    return h5py


def find_bilm_tf(path: Path) -> tuple[Path, Path] | None:
    """(options file, weights file) of a bilm-tf folder (or of the options file given), or None when it is not one.
    Released folders name them ``*_options.json`` and ``*_weights.hdf5``."""
    folder = path if path.is_dir() else path.parent
    options = [path] if path.is_file() and path.suffix == ".json" else sorted(folder.glob("*options.json"))
    weights = sorted(folder.glob("*weights*.hdf5")) or sorted(folder.glob("*weights*.h5"))
    if len(options) != 1 or not weights:
        return None
    if len(weights) > 1:
        raise CheckpointError(f"{folder}: several weight files ({', '.join(w.name for w in weights)}); keep one")
    return options[0], weights[0]


# Where a bilm-tf weights file holds the softmax (its training checkpoint's names; dump_weights leaves it out).
SOFTMAX_DATASETS = {"softmax_weight": "softmax/W", "softmax_bias": "softmax/b"}


def bilm_tf_softmax(path: Path) -> dict[str, torch.Tensor]:
    """The softmax of a bilm-tf folder as the bilm objective's state (``softmax_weight`` (V, H), ``softmax_bias``
    (V,)), where its weights file has one; empty otherwise (the released files do not)."""
    found = find_bilm_tf(path)
    if found is None:
        return {}
    with h5py_module().File(found[1], "r") as weights:
        if not all(name in weights for name in SOFTMAX_DATASETS.values()):
            return {}
        return {ours: torch.from_numpy(weights[name][...]).float() for ours, name in SOFTMAX_DATASETS.items()}


_KIND_NAMES = {int: "an integer", float: "a number", bool: "true/false", list: "a list", str: "a string"}
_MISSING = object()


def _field(options: dict, path: str, kinds: tuple[type, ...], where: Path, default: Any = _MISSING) -> Any:
    """options["a"]["b"] for path "a.b", of one of ``kinds`` (a bool is never taken for a number); ``default`` when
    absent or null, or CheckpointError naming the file and the field."""
    value: Any = options
    for key in path.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    if value is None:
        if default is _MISSING:
            raise CheckpointError(f"{where}: missing field {path!r}")
        return default
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        expected = " or ".join(_KIND_NAMES[k] for k in kinds)
        raise CheckpointError(f"{where}: field {path!r} is {value!r}; expected {expected}")
    return value


def read_options(path: Path) -> ElmoConfig:
    """The model config of a bilm-tf options.json; a missing or wrong-typed field names the file and the field."""
    try:
        options = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{path}: not a readable JSON options file ({err})") from err
    if not isinstance(options, dict):
        raise CheckpointError(f"{path}: expected a JSON object with 'lstm' and 'char_cnn'")
    integer, number = (int,), (int, float)
    filters = _field(options, "char_cnn.filters", (list,), path)
    if not filters or not all(
        isinstance(f, list) and len(f) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in f)
        for f in filters
    ):
        raise CheckpointError(f"{path}: field 'char_cnn.filters' is {filters!r}; expected [[width, number], ...]")
    activation = _field(options, "char_cnn.activation", (str,), path)
    if activation not in ("relu", "tanh"):
        raise CheckpointError(f"{path}: field 'char_cnn.activation' is {activation!r}; expected relu or tanh")
    n_characters = _field(options, "char_cnn.n_characters", integer, path, default=NUM_CHARACTER_IDS)
    if n_characters not in (NUM_CHARACTER_IDS - 1, NUM_CHARACTER_IDS):
        raise CheckpointError(f"{path}: field 'char_cnn.n_characters' is {n_characters}; expected 261 or 262")
    return ElmoConfig(
        char_embedding_size=_field(options, "char_cnn.embedding.dim", integer, path),
        filters=[list(f) for f in filters],
        num_highway=_field(options, "char_cnn.n_highway", integer, path, default=0),
        activation=CnnActivation(activation),
        max_characters=_field(options, "char_cnn.max_characters_per_token", integer, path),
        hidden_size=_field(options, "lstm.projection_dim", integer, path),
        cell_size=_field(options, "lstm.dim", integer, path),
        num_layers=_field(options, "lstm.n_layers", integer, path, default=1),
        cell_clip=_optional_float(_field(options, "lstm.cell_clip", number, path, default=None)),
        projection_clip=_optional_float(_field(options, "lstm.proj_clip", number, path, default=None)),
        residual=_field(options, "lstm.use_skip_connections", (bool,), path, default=False),
        dropout=float(_field(options, "dropout", number, path, default=0.1)),
    )


def _optional_float(value) -> float | None:
    return None if value is None else float(value)


class _Reader:
    """Datasets of an open HDF5 file by path, checked against the shape the options imply."""

    def __init__(self, handle, path: Path):
        self.handle, self.path = handle, path

    def __call__(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        if name not in self.handle:
            raise CheckpointError(f"{self.path}: no dataset {name!r} (the options ask for it)")
        array = self.handle[name][...]
        if tuple(array.shape) != shape:
            raise CheckpointError(
                f"{self.path}: dataset {name!r} has shape {tuple(array.shape)}, the options imply {shape}"
            )
        return array.astype(np.float32)

    def has(self, name: str) -> bool:
        return name in self.handle


def _cell_group(direction: int, layer: int, num_layers: int) -> str:
    if num_layers == 1:
        return f"RNN_{direction}/RNN/LSTMCell"
    return f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"


def _tf_to_torch_gates(x: np.ndarray) -> np.ndarray:
    """Rows (i, j, f, o) -> (i, f, j, o) along axis 0."""
    i, j, f, o = np.split(x, 4, axis=0)
    return np.concatenate([i, f, j, o], axis=0)


def read_weights(path: Path, config: ElmoConfig) -> dict[str, torch.Tensor]:
    """Our state dict from a bilm-tf HDF5 file, every dataset checked against ``config``."""
    h5py = h5py_module()
    try:
        handle = h5py.File(path, "r")
    except OSError as err:
        raise CheckpointError(f"{path}: not a readable HDF5 file ({err})") from err
    state: dict[str, np.ndarray] = {}
    with handle:
        read = _Reader(handle, path)
        embed, hidden, cells = config.char_embedding_size, config.hidden_size, config.cell_size
        table = np.zeros((NUM_CHARACTER_IDS, embed), dtype=np.float32)
        table[1:] = read("char_embed", (NUM_CHARACTER_IDS - 1, embed))
        state["token_encoder.char_embedding.weight"] = table
        for i, (width, num) in enumerate(config.filters):
            weight = read(f"CNN/W_cnn_{i}", (1, width, embed, num))
            state[f"token_encoder.convolutions.{i}.weight"] = weight[0].transpose(2, 1, 0)  # (n, E, w)
            state[f"token_encoder.convolutions.{i}.bias"] = read(f"CNN/b_cnn_{i}", (num,))
        num_filters = sum(num for _, num in config.filters)
        for k in range(config.num_highway):
            for part in ("carry", "transform"):
                prefix = f"token_encoder.highways.{k}.{part}"
                state[f"{prefix}.weight"] = read(f"CNN_high_{k}/W_{part}", (num_filters, num_filters)).T
                state[f"{prefix}.bias"] = read(f"CNN_high_{k}/b_{part}", (num_filters,))
        if read.has("CNN_proj/W_proj") or num_filters != hidden:
            state["token_encoder.projection.weight"] = read("CNN_proj/W_proj", (num_filters, hidden)).T
            state["token_encoder.projection.bias"] = read("CNN_proj/b_proj", (hidden,))
        else:  # bilm-tf skips the projection when the filters already have the LSTM's width
            state["token_encoder.projection.weight"] = np.eye(hidden, dtype=np.float32)
            state["token_encoder.projection.bias"] = np.zeros(hidden, dtype=np.float32)
        for direction, name in enumerate(("forward_layers", "backward_layers")):
            for layer in range(config.num_layers):
                group = _cell_group(direction, layer, config.num_layers)
                prefix = f"{name}.{layer}"
                weight = _tf_to_torch_gates(read(f"{group}/W_0", (2 * hidden, 4 * cells)).T)  # (4C, I + H)
                state[f"{prefix}.input_linearity.weight"] = weight[:, :hidden]
                state[f"{prefix}.state_linearity.weight"] = weight[:, hidden:]
                bias = read(f"{group}/B", (4 * cells,)).copy()
                bias[2 * cells : 3 * cells] += TF_FORGET_BIAS
                state[f"{prefix}.state_linearity.bias"] = _tf_to_torch_gates(bias)
                if cells != hidden:
                    state[f"{prefix}.state_projection.weight"] = read(f"{group}/W_P_0", (cells, hidden)).T
    return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state.items()}


def import_bilm_tf(path: str | Path) -> Elmo:
    """An ``Elmo`` backbone with the weights of a bilm-tf folder (or options file with the weights beside it)."""
    path = Path(path).expanduser()
    found = find_bilm_tf(path)
    if found is None:
        raise CheckpointError(f"{path}: no bilm-tf options file (*options.json) with a *weights*.hdf5 beside it")
    options, weights = found
    config = read_options(options)
    try:
        model = Elmo(config)
    except ConfigError as err:
        raise CheckpointError(f"{options}: {err}") from err
    state = read_weights(weights, config)
    model.load_state_dict(state)
    return model


def bilm_tf_tokenizer(path: Path) -> Tokenizer:
    """The word tokenizer of a bilm-tf folder: its vocabulary file (*vocab*.txt) when there is one, else the sentence
    markers alone (ELMo reads every word as characters; word ids serve only a softmax)."""
    folder = path if path.is_dir() else path.parent
    vocabularies = sorted(folder.glob("*vocab*.txt"))
    return read_bilm_vocab(vocabularies[0]) if len(vocabularies) == 1 else word_tokenizer([])


register_format(
    CheckpointFormat(
        name="bilm_tf",
        description="a bilm-tf folder (*options.json + *weights*.hdf5)",
        detect=lambda path: find_bilm_tf(path) is not None,
        load=lambda path: (import_bilm_tf(path), bilm_tf_tokenizer(path)),
        heads=lambda path: ("bilm", bilm_tf_softmax(path)),
    )
)


def write_options(config: ElmoConfig) -> dict:
    return {
        "lstm": {
            "cell_clip": config.cell_clip,
            "use_skip_connections": config.residual,
            "n_layers": config.num_layers,
            "proj_clip": config.projection_clip,
            "projection_dim": config.hidden_size,
            "dim": config.cell_size,
        },
        "char_cnn": {
            "embedding": {"dim": config.char_embedding_size},
            "filters": [list(f) for f in config.filters],
            "n_highway": config.num_highway,
            "n_characters": NUM_CHARACTER_IDS,
            "max_characters_per_token": config.max_characters,
            "activation": CnnActivation(config.activation).value,
        },
        "dropout": config.dropout,
    }


def export_bilm_tf(folder: str | Path, model: Elmo, tokenizer: Tokenizer | None = None) -> Path:
    """Write ``options.json`` and ``weights.hdf5`` in bilm-tf's layout (the inverse of ``read_weights``), and a word
    ``tokenizer``'s vocabulary as ``vocab.txt``. Like bilm-tf's ``dump_weights``, the softmax is left out. Writes into
    ``folder`` as it is: ``plm-export --format bilm-tf`` (``export.export_checkpoint``) writes atomically."""
    h5py = h5py_module()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if tokenizer is not None:
        write_bilm_vocab(tokenizer, folder / VOCAB_FILE)
    config = model.config
    state = {k: v.detach().cpu().float().numpy() for k, v in model.state_dict().items()}
    cells, hidden = config.cell_size, config.hidden_size
    (folder / OPTIONS_FILE).write_text(json.dumps(write_options(config), indent=2) + "\n")
    with h5py.File(folder / WEIGHTS_FILE, "w") as out:
        out["char_embed"] = state["token_encoder.char_embedding.weight"][1:]
        for i in range(len(config.filters)):
            out[f"CNN/W_cnn_{i}"] = state[f"token_encoder.convolutions.{i}.weight"].transpose(2, 1, 0)[None]
            out[f"CNN/b_cnn_{i}"] = state[f"token_encoder.convolutions.{i}.bias"]
        for k in range(config.num_highway):
            for part in ("carry", "transform"):
                out[f"CNN_high_{k}/W_{part}"] = state[f"token_encoder.highways.{k}.{part}.weight"].T
                out[f"CNN_high_{k}/b_{part}"] = state[f"token_encoder.highways.{k}.{part}.bias"]
        out["CNN_proj/W_proj"] = state["token_encoder.projection.weight"].T
        out["CNN_proj/b_proj"] = state["token_encoder.projection.bias"]
        for direction, name in enumerate(("forward_layers", "backward_layers")):
            for layer in range(config.num_layers):
                group, prefix = _cell_group(direction, layer, config.num_layers), f"{name}.{layer}"
                weight = np.concatenate(
                    [state[f"{prefix}.input_linearity.weight"], state[f"{prefix}.state_linearity.weight"]], axis=1
                )
                # (i, f, j, o) -> (i, j, f, o) is the same swap of the middle blocks.
                out[f"{group}/W_0"] = _tf_to_torch_gates(weight).T
                bias = _tf_to_torch_gates(state[f"{prefix}.state_linearity.bias"]).copy()
                bias[2 * cells : 3 * cells] -= TF_FORGET_BIAS
                out[f"{group}/B"] = bias
                if cells != hidden:
                    out[f"{group}/W_P_0"] = state[f"{prefix}.state_projection.weight"].T
    return folder
