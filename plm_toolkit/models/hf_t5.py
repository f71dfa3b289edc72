"""Import and export of Hugging Face T5 folders (``T5ForConditionalGeneration`` layout, v1.0 and v1.1).

Nothing here imports ``transformers``. Names map one to one (``S`` = ``encoder`` or ``decoder``, ``i`` a layer;
the feed-forward sits at ``layer.1`` in the encoder and ``layer.2`` in the decoder):

=================================================  ========================================================
ours (``models/t5.py``)                            Hugging Face
=================================================  ========================================================
``shared.weight``                                  ``shared.weight`` (``S.embed_tokens.weight`` are copies)
``S.relative_bias.relative_attention_bias``        ``S.block.0.layer.0.SelfAttention.relative_attention_bias``
``S.layers.i.self_attention_norm``                 ``S.block.i.layer.0.layer_norm``
``S.layers.i.self_attention.{q,k,v,o}``            ``S.block.i.layer.0.SelfAttention.{q,k,v,o}``
``decoder.layers.i.cross_attention_norm``          ``decoder.block.i.layer.1.layer_norm``
``decoder.layers.i.cross_attention.{q,k,v,o}``     ``decoder.block.i.layer.1.EncDecAttention.{q,k,v,o}``
``S.layers.i.feed_forward_norm``                   ``S.block.i.layer.{1|2}.layer_norm``
``S.layers.i.feed_forward.{wi,wi_0,wi_1,wo}``      ``S.block.i.layer.{1|2}.DenseReluDense.{wi,wi_0,wi_1,wo}``
``S.final_norm``                                   ``S.final_layer_norm``
``lm_head`` (v1.1 only)                            ``lm_head``
=================================================  ========================================================

Config: v1.0 is ``feed_forward_proj: relu`` with ``tie_word_embeddings: true`` (tied output layer, decoder states
rescaled by d_model^-0.5); v1.1 is ``gated-gelu`` with ``tie_word_embeddings: false``. transformers 5 writes a v1.1
model as ``tie_word_embeddings: true, scale_decoder_outputs: false`` without ``lm_head.weight``: that imports as an
untied head starting from a copy of the embedding, which computes the same function.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from plm_toolkit.errors import CheckpointError
from plm_toolkit.models.hf import CONFIG_FILE, _read_json, _read_weights, _some, _write
from plm_toolkit.models.t5 import T5, T5Config

_FEED_FORWARD_FROM_HF = {"relu": "relu", "gated-gelu": "gated_gelu"}
_FEED_FORWARD_TO_HF = {v: k for k, v in _FEED_FORWARD_FROM_HF.items()}
# Our T5Config field <- config.json key, for the keys every T5 config.json has.
_CONFIG_FROM_HF = {
    "vocab_size": "vocab_size",
    "hidden_size": "d_model",
    "num_layers": "num_layers",
    "num_heads": "num_heads",
    "head_size": "d_kv",
    "intermediate_size": "d_ff",
}
# The same for keys with a default.
_OPTIONAL_FROM_HF = {
    "num_decoder_layers": ("num_decoder_layers", None),
    "relative_attention_num_buckets": ("relative_attention_num_buckets", 32),
    "relative_attention_max_distance": ("relative_attention_max_distance", 128),
    "dropout": ("dropout_rate", 0.1),
    "layer_norm_eps": ("layer_norm_epsilon", 1e-6),
    "initializer_factor": ("initializer_factor", 1.0),
    "pad_token_id": ("pad_token_id", 0),
}


@dataclass
class HFT5Import:
    # Our config, read from config.json.
    model_config: T5Config
    # Weights for ``T5(model_config).load_state_dict``.
    model_state: dict[str, torch.Tensor]
    # The folder's tokenizer (tokenizer.json; the released folders may hold only spiece.model: then None).
    tokenizer_file: Path | None
    # config.json's eos_token_id (T5: 1).
    eos_token_id: int


def key_map(config: T5Config) -> dict[str, str]:
    """Every one of our parameter names -> its Hugging Face name."""
    names = {"shared.weight": "shared.weight"}
    if not config.tie_word_embeddings:
        names["lm_head.weight"] = "lm_head.weight"
    ff_names = ("wi_0", "wi_1", "wo") if _gated(config) else ("wi", "wo")
    stacks = {"encoder": config.num_layers, "decoder": config.num_decoder_layers or config.num_layers}
    for stack, layers in stacks.items():
        names[f"{stack}.relative_bias.relative_attention_bias.weight"] = (
            f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
        )
        names[f"{stack}.final_norm.weight"] = f"{stack}.final_layer_norm.weight"
        for i in range(layers):
            ours, theirs = f"{stack}.layers.{i}.", f"{stack}.block.{i}.layer."
            parts = [("self_attention", "0", "SelfAttention")]
            if stack == "decoder":
                parts.append(("cross_attention", "1", "EncDecAttention"))
            for name, index, module in parts:
                names[f"{ours}{name}_norm.weight"] = f"{theirs}{index}.layer_norm.weight"
                for p in "qkvo":
                    names[f"{ours}{name}.{p}.weight"] = f"{theirs}{index}.{module}.{p}.weight"
            index = "2" if stack == "decoder" else "1"
            names[f"{ours}feed_forward_norm.weight"] = f"{theirs}{index}.layer_norm.weight"
            for p in ff_names:
                names[f"{ours}feed_forward.{p}.weight"] = f"{theirs}{index}.DenseReluDense.{p}.weight"
    return names


def _gated(config: T5Config) -> bool:
    return getattr(config.feed_forward, "value", config.feed_forward) == "gated_gelu"


def config_from_hf(hf: dict, path: Path, untied_head: bool) -> T5Config:
    """Our T5Config from a config.json; ``untied_head``: the weights hold an lm_head of their own."""
    if hf.get("model_type") != "t5":
        raise CheckpointError(f"{path}: model_type is {hf.get('model_type')!r}; expected 't5'")
    proj = hf.get("feed_forward_proj", "relu")
    if proj not in _FEED_FORWARD_FROM_HF:
        raise CheckpointError(f"{path}: feed_forward_proj {proj!r} is not one of {', '.join(_FEED_FORWARD_FROM_HF)}")
    missing = [theirs for theirs in _CONFIG_FROM_HF.values() if theirs not in hf]
    if missing:
        raise CheckpointError(f"{path}: missing key(s) {', '.join(missing)}")
    fields = {ours: hf[theirs] for ours, theirs in _CONFIG_FROM_HF.items()}
    fields |= {ours: hf.get(theirs, default) for ours, (theirs, default) in _OPTIONAL_FROM_HF.items()}
    if fields["num_decoder_layers"] == fields["num_layers"]:
        fields["num_decoder_layers"] = None
    tied = bool(hf.get("tie_word_embeddings", True))
    scaled = bool(hf.get("scale_decoder_outputs", tied))
    if scaled and (untied_head or not tied):
        raise CheckpointError(
            f"{path}: an untied lm_head with decoder outputs rescaled by d_model^-0.5 is neither T5 v1.0 nor v1.1"
        )
    return T5Config(**fields, feed_forward=_FEED_FORWARD_FROM_HF[proj], tie_word_embeddings=scaled)


def import_hf_t5(folder: str | Path) -> HFT5Import:
    """Read a Hugging Face T5 folder; ``CheckpointError`` naming the file and key on anything unusable."""
    folder = Path(folder)
    hf = _read_json(folder / CONFIG_FILE)
    weights_file, state = _read_weights(folder)
    state = dict(state)
    for stack in ("encoder", "decoder"):
        copy = state.pop(f"{stack}.embed_tokens.weight", None)
        if "shared.weight" not in state and copy is not None:
            state["shared.weight"] = copy
    # The cross-attention of transformers' T5 never had a bias table; some files still carry an unused one.
    state.pop("decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight", None)
    head = state.get("lm_head.weight")
    untied = head is not None and not torch.equal(head, state.get("shared.weight", head))
    config = config_from_hf(hf, folder / CONFIG_FILE, untied)
    if not config.tie_word_embeddings and head is None and "shared.weight" in state:
        state["lm_head.weight"] = state["shared.weight"].clone()  # transformers 5's tied v1.1 (see above)
    elif config.tie_word_embeddings:
        state.pop("lm_head.weight", None)  # tied: the same matrix as shared.weight
    names = key_map(config)
    absent = [theirs for theirs in names.values() if theirs not in state]
    if absent:
        raise CheckpointError(f"{weights_file}: missing key(s) {_some(absent)}")
    model_state = {ours: state.pop(theirs) for ours, theirs in names.items()}
    if state:
        raise CheckpointError(f"{weights_file}: unexpected key(s) {_some(sorted(state))}")
    with torch.device("meta"):
        expected = {k: v.shape for k, v in T5(config).state_dict().items()}
    for key, value in model_state.items():
        if value.shape != expected[key]:
            raise CheckpointError(
                f"{weights_file}: {names[key]} has shape {tuple(value.shape)}; config.json implies "
                f"{tuple(expected[key])}"
            )
    tokenizer = folder / "tokenizer.json"
    return HFT5Import(config, model_state, tokenizer if tokenizer.is_file() else None, hf.get("eos_token_id", 1))


def config_to_hf(config: T5Config, eos_token_id: int = 1) -> dict:
    return {
        "architectures": ["T5ForConditionalGeneration"],
        "model_type": "t5",
        "vocab_size": config.vocab_size,
        "d_model": config.hidden_size,
        "d_kv": config.head_size,
        "d_ff": config.intermediate_size,
        "num_layers": config.num_layers,
        "num_decoder_layers": config.num_decoder_layers or config.num_layers,
        "num_heads": config.num_heads,
        "relative_attention_num_buckets": config.relative_attention_num_buckets,
        "relative_attention_max_distance": config.relative_attention_max_distance,
        "dropout_rate": config.dropout,
        "layer_norm_epsilon": config.layer_norm_eps,
        "initializer_factor": config.initializer_factor,
        "feed_forward_proj": _FEED_FORWARD_TO_HF[getattr(config.feed_forward, "value", config.feed_forward)],
        "tie_word_embeddings": config.tie_word_embeddings,
        "is_encoder_decoder": True,
        "pad_token_id": config.pad_token_id,
        "decoder_start_token_id": config.pad_token_id,
        "eos_token_id": eos_token_id,
    }


def export_hf_t5(folder: str | Path, model: T5, tokenizer_file: str | Path | None = None, eos_token_id: int = 1):
    """Write ``model`` as a ``T5ForConditionalGeneration`` folder (config.json, model.safetensors, tokenizer)."""
    state = model.state_dict()
    tensors = {theirs: state[ours] for ours, theirs in key_map(model.config).items()}
    _write(Path(folder), tensors, config_to_hf(model.config, eos_token_id), tokenizer_file)
