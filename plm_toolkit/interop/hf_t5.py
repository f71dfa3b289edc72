"""Hugging Face adapter of T5 (``T5ForConditionalGeneration`` layout, v1.0 and v1.1).

Names map one to one (``S`` = ``encoder`` or ``decoder``, ours ``S_stack``; ``i`` a layer; the feed-forward sits at
``layer.1`` in the encoder and ``layer.2`` in the decoder):

=================================================  ========================================================
ours (``models/t5.py``)                            Hugging Face
=================================================  ========================================================
``shared.weight``                                  ``shared.weight`` (``S.embed_tokens.weight`` are copies)
``S.relative_bias.relative_attention_bias``        ``S.block.0.layer.0.SelfAttention.relative_attention_bias``
``S.layers.i.attention_layer_norm``                ``S.block.i.layer.0.layer_norm``
``S.layers.i.attention.{query,key,value,output}``  ``S.block.i.layer.0.SelfAttention.{q,k,v,o}``
``decoder.layers.i.cross_attention_layer_norm``    ``decoder.block.i.layer.1.layer_norm``
``decoder.layers.i.cross_attention.*``             ``decoder.block.i.layer.1.EncDecAttention.{q,k,v,o}``
``S.layers.i.output_layer_norm``                   ``S.block.i.layer.{1|2}.layer_norm``
``S.layers.i.feed_forward.intermediate``           ``...DenseReluDense.wi`` (v1.1: ``wi_0``)
``S.layers.i.feed_forward.intermediate_linear``    ``...DenseReluDense.wi_1`` (v1.1 only)
``S.layers.i.feed_forward.output``                 ``...DenseReluDense.wo``
``S.final_layer_norm``                             ``S.final_layer_norm``
``lm_head`` (v1.1 only)                            ``lm_head``
=================================================  ========================================================

Config: v1.0 is ``feed_forward_proj: relu`` with ``tie_word_embeddings: true`` (tied output layer, decoder states
rescaled by d_model^-0.5); v1.1 is ``gated-gelu`` with ``tie_word_embeddings: false``. transformers 5 writes a v1.1
model as ``tie_word_embeddings: true, scale_decoder_outputs: false`` without ``lm_head.weight``: that imports as an
untied head starting from a copy of the embedding, which computes the same function.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from plm_toolkit.core.choices import choice
from plm_toolkit.core.errors import CheckpointError
from plm_toolkit.interop.hf import ADAPTERS, Adapter, ExportPart, HFImport, config_values, take
from plm_toolkit.interop.hf_tokenizer import WITHOUT_TOKEN_TYPES, TokenizerLayout
from plm_toolkit.models.t5 import T5Config

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
# The same for keys with a default: (config.json key, default).
_OPTIONAL_FROM_HF = {
    "num_decoder_layers": ("num_decoder_layers", None),
    "relative_attention_num_buckets": ("relative_attention_num_buckets", 32),
    "relative_attention_max_distance": ("relative_attention_max_distance", 128),
    "dropout": ("dropout_rate", 0.1),
    "layer_norm_eps": ("layer_norm_epsilon", 1e-6),
    "initializer_factor": ("initializer_factor", 1.0),
    "pad_token_id": ("pad_token_id", 0),
}
_ATTENTION = {"query": "q", "key": "k", "value": "v", "output": "o"}


def key_map(config: T5Config) -> dict[str, str]:
    """Every one of our parameter names -> its Hugging Face name."""
    names = {"shared.weight": "shared.weight"}
    if not config.tie_word_embeddings:
        names["lm_head.weight"] = "lm_head.weight"
    gated = choice(config.feed_forward) == "gated_gelu"
    feed_forward = {"intermediate": "wi_0", "intermediate_linear": "wi_1"} if gated else {"intermediate": "wi"}
    feed_forward["output"] = "wo"
    stacks = {"encoder": config.num_layers, "decoder": config.num_decoder_layers or config.num_layers}
    for stack, layers in stacks.items():
        names[f"{stack}_stack.relative_bias.relative_attention_bias.weight"] = (
            f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
        )
        names[f"{stack}_stack.final_layer_norm.weight"] = f"{stack}.final_layer_norm.weight"
        for i in range(layers):
            ours, theirs = f"{stack}_stack.layers.{i}.", f"{stack}.block.{i}.layer."
            parts = [("attention", "0", "SelfAttention")]
            if stack == "decoder":
                parts.append(("cross_attention", "1", "EncDecAttention"))
            for name, index, module in parts:
                names[f"{ours}{name}_layer_norm.weight"] = f"{theirs}{index}.layer_norm.weight"
                for mine, short in _ATTENTION.items():
                    names[f"{ours}{name}.{mine}.weight"] = f"{theirs}{index}.{module}.{short}.weight"
            index = "2" if stack == "decoder" else "1"
            names[f"{ours}output_layer_norm.weight"] = f"{theirs}{index}.layer_norm.weight"
            for mine, short in feed_forward.items():
                names[f"{ours}feed_forward.{mine}.weight"] = f"{theirs}{index}.DenseReluDense.{short}.weight"
    return names


@ADAPTERS.register
class T5Adapter(Adapter):
    model_type = "t5"
    family = "t5"
    objective = "span_corruption"
    # The released folders hold spiece.model; tokenizer.json only where someone saved one.
    tokenizer_required = False
    # T5Config holds no bos_token_id (the decoder starts from decoder_start_token_id, the pad token).
    tokenizer = TokenizerLayout(model_input_names=WITHOUT_TOKEN_TYPES, config_roles=("pad", "eos"))

    def config_from_hf(self, hf: dict, path: Path) -> T5Config:
        proj = hf.get("feed_forward_proj", "relu")
        if proj not in _FEED_FORWARD_FROM_HF:
            raise CheckpointError(
                f"{path}: feed_forward_proj {proj!r} is not one of {', '.join(_FEED_FORWARD_FROM_HF)}"
            )
        fields = config_values(hf, _CONFIG_FROM_HF, path)
        fields |= {ours: hf.get(theirs, default) for ours, (theirs, default) in _OPTIONAL_FROM_HF.items()}
        if fields["num_decoder_layers"] == fields["num_layers"]:
            fields["num_decoder_layers"] = None
        # transformers 5 writes scale_decoder_outputs; before it, tie_word_embeddings decided both the tie and the
        # rescale. The head's weights settle the tie in import_state.
        scaled = bool(hf.get("scale_decoder_outputs", hf.get("tie_word_embeddings", True)))
        return T5Config(**fields, feed_forward=_FEED_FORWARD_FROM_HF[proj], tie_word_embeddings=scaled)

    def import_state(
        self, state: dict[str, torch.Tensor], config: T5Config, weights_file: Path, folder: Path, **options: Any
    ) -> HFImport:
        for stack in ("encoder", "decoder"):
            copy = state.pop(f"{stack}.embed_tokens.weight", None)
            if "shared.weight" not in state and copy is not None:
                state["shared.weight"] = copy
        # transformers' T5 cross-attention never had a bias table; some files still carry an unused one.
        state.pop("decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight", None)
        head = state.get("lm_head.weight")
        untied = head is not None and "shared.weight" in state and not torch.equal(head, state["shared.weight"])
        if config.tie_word_embeddings:
            if untied:
                raise CheckpointError(
                    f"{weights_file}: an lm_head of its own with decoder outputs rescaled by d_model^-0.5 is neither "
                    "T5 v1.0 nor v1.1"
                )
            state.pop("lm_head.weight", None)  # the same matrix as shared.weight
        elif head is None and "shared.weight" in state:
            state["lm_head.weight"] = state["shared.weight"].clone()  # transformers 5's tied v1.1 (module doc)
        names = key_map(config)
        model_state = take(state, names, weights_file)
        return HFImport(config, model_state, {}, None, objective=self.objective, source_keys=names)

    def export(self, model, objective_state: dict[str, torch.Tensor], objective_config: Any) -> list[ExportPart]:
        if objective_state:
            raise CheckpointError(
                f"objective state key(s) {', '.join(sorted(objective_state))} have no place in a Hugging Face T5"
            )
        config = model.config
        state = model.state_dict()
        tensors = {theirs: state[ours] for ours, theirs in key_map(config).items()}
        return [ExportPart("", tensors, config_to_hf(config))]


def config_to_hf(config: T5Config) -> dict:
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
        "feed_forward_proj": _FEED_FORWARD_TO_HF[choice(config.feed_forward)],
        "tie_word_embeddings": config.tie_word_embeddings,
        "is_encoder_decoder": True,
        "pad_token_id": config.pad_token_id,
        "decoder_start_token_id": config.pad_token_id,
        "eos_token_id": 1,  # </s> in T5's vocabulary and a trained t5_unigram one; an exported tokenizer's wins
    }
