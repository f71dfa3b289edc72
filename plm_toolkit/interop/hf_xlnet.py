"""Hugging Face adapter of XLNet (``XLNetModel`` / ``XLNetLMHeadModel`` layout).

Parameter names map one to one; transformers keeps each attention projection as a (d_model, n_head, d_head)
tensor used through einsum, ours are ``nn.Linear`` weights:

==========================================  ================================================
ours (``models/xlnet.py``)                  Hugging Face (``transformer.`` prefix in LMHead)
==========================================  ================================================
``word_embedding.weight``                   ``word_embedding.weight``
``mask_embedding`` (H,)                     ``mask_emb`` (1, 1, H)
``layers.i.attention.{query,key,value,      ``layer.i.rel_attn.{q,k,v,r}`` reshaped (H, n*d)
position}.weight``                          and transposed
``layers.i.attention.output.weight``        ``layer.i.rel_attn.o`` reshaped (H, n*d)
``layers.i.attention.content_bias`` (u)     ``layer.i.rel_attn.r_w_bias``
``layers.i.attention.position_bias`` (v)    ``layer.i.rel_attn.r_r_bias``
``layers.i.attention.segment_bias`` (b)     ``layer.i.rel_attn.r_s_bias``
``layers.i.attention.segment_embed``        ``layer.i.rel_attn.seg_embed``
``layers.i.attention.layer_norm.*``         ``layer.i.rel_attn.layer_norm.*``
``layers.i.feed_forward.{intermediate,      ``layer.i.ff.{layer_1,layer_2,layer_norm}.*``
output,layer_norm}.*``
objective ``plm``: ``bias``                 ``lm_loss.bias`` (``lm_loss.weight`` is the tied embedding)
==========================================  ================================================

Fine-tuned releases: ``XLNetForSequenceClassification``'s ``sequence_summary.summary`` (a tanh dense layer over the
last token) + ``logits_proj`` (``logits_proj`` alone with ``summary_use_proj: false`` and ``summary_activation:
linear``: what a plain linear head exports as), ``XLNetForTokenClassification``'s ``classifier``,
``XLNetForQuestionAnsweringSimple``'s ``qa_outputs``; the beam-search SQuAD head of ``XLNetForQuestionAnswering`` and
multiple choice are recognised but not mapped.

transformers' XLNetConfig requires d_head = d_model / n_head, so a model with another ``head_size`` is refused at
export; the released folders may hold only ``spiece.model``, so import does not require a tokenizer file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from plm_toolkit.core.choices import choice
from plm_toolkit.core.errors import CheckpointError
from plm_toolkit.interop.hf import ADAPTERS, Adapter, ExportPart, HFImport, some
from plm_toolkit.interop.hf_heads import HeadLayout, linear_keys, unmapped
from plm_toolkit.interop.hf_tokenizer import TokenizerLayout
from plm_toolkit.models.xlnet import XLNetConfig

_ACT_FROM_HF = {"gelu": "gelu", "gelu_new": "gelu_tanh", "relu": "relu"}
_ACT_TO_HF = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu"}
_PROJECTIONS = {"query": "q", "key": "k", "value": "v", "position": "r"}
_PLAIN = {
    "content_bias": "r_w_bias",
    "position_bias": "r_r_bias",
    "segment_bias": "r_s_bias",
    "segment_embed": "seg_embed",
    "layer_norm.weight": "layer_norm.weight",
    "layer_norm.bias": "layer_norm.bias",
}
_FEED_FORWARD = {"intermediate": "layer_1", "output": "layer_2", "layer_norm": "layer_norm"}
# XLNetForQuestionAnswering's start, end and answer-class networks (beam search over start/end pairs).
_BEAM_QA = unmapped(
    "XLNet's beam-search SQuAD head (start, end and answer-class networks); task=squad scores starts and ends with "
    "one linear layer (XLNetForQuestionAnsweringSimple's)",
    "start_logits.dense",
    "end_logits.dense_0",
    "end_logits.LayerNorm",
    "end_logits.dense_1",
    "answer_class.dense_0",
    weights_only=("answer_class.dense_1",),
)
_SUMMARY_ACTIVATIONS = ("tanh", "gelu")
# summary_activation values that apply none (transformers' linear is the identity).
_NO_ACTIVATION = (None, "", "linear")


def _head_size(config: XLNetConfig) -> int:
    return config.head_size or config.hidden_size // config.num_heads


def _to_ours(theirs: dict[str, torch.Tensor], config: XLNetConfig) -> dict[str, torch.Tensor]:
    hidden, inner = config.hidden_size, config.num_heads * _head_size(config)
    ours = {
        "word_embedding.weight": theirs.pop("word_embedding.weight"),
        "mask_embedding": theirs.pop("mask_emb").reshape(hidden),  # (H,)
    }
    for i in range(config.num_layers):
        att, ff = f"layer.{i}.rel_attn.", f"layer.{i}.ff."
        for name, key in _PROJECTIONS.items():
            ours[f"layers.{i}.attention.{name}.weight"] = theirs.pop(att + key).reshape(hidden, inner).T  # (n*d, H)
        ours[f"layers.{i}.attention.output.weight"] = theirs.pop(att + "o").reshape(hidden, inner)  # (H, n*d)
        for name, key in _PLAIN.items():
            ours[f"layers.{i}.attention.{name}"] = theirs.pop(att + key)
        for name, key in _FEED_FORWARD.items():
            for param in ("weight", "bias"):
                ours[f"layers.{i}.feed_forward.{name}.{param}"] = theirs.pop(f"{ff}{key}.{param}")
    return ours


def _to_theirs(ours: dict[str, torch.Tensor], config: XLNetConfig) -> dict[str, torch.Tensor]:
    hidden, heads, head_size = config.hidden_size, config.num_heads, _head_size(config)
    theirs = {
        "word_embedding.weight": ours["word_embedding.weight"],
        "mask_emb": ours["mask_embedding"].reshape(1, 1, hidden),  # (1, 1, H)
    }
    for i in range(config.num_layers):
        att, ff = f"layer.{i}.rel_attn.", f"layer.{i}.ff."
        for name, key in _PROJECTIONS.items():
            weight = ours[f"layers.{i}.attention.{name}.weight"]  # (n*d, H)
            theirs[att + key] = weight.T.reshape(hidden, heads, head_size)  # (H, n, d)
        theirs[att + "o"] = ours[f"layers.{i}.attention.output.weight"].reshape(hidden, heads, head_size)  # (H, n, d)
        for name, key in _PLAIN.items():
            theirs[att + key] = ours[f"layers.{i}.attention.{name}"]
        for name, key in _FEED_FORWARD.items():
            for param in ("weight", "bias"):
                theirs[f"{ff}{key}.{param}"] = ours[f"layers.{i}.feed_forward.{name}.{param}"]
    return theirs


@ADAPTERS.register
class XLNetAdapter(Adapter):
    model_type = "xlnet"
    family = "xlnet"
    objective = "plm"
    tokenizer_required = False
    prefix = "transformer."
    # Left, as transformers' XLNet tokenizer pads: its sequence summary reads the last position. Positions are
    # relative and padding is masked, so the run's right-padded rows score the same.
    tokenizer = TokenizerLayout(padding_side="left")

    def config_from_hf(self, hf: dict, path: Path) -> XLNetConfig:
        if hf.get("attn_type", "bi") != "bi" or hf.get("same_length", False):
            raise CheckpointError(f"{path}: only attn_type 'bi' without same_length is supported")
        act = hf.get("ff_activation", "gelu")
        if act not in _ACT_FROM_HF:
            raise CheckpointError(f"{path}: ff_activation {act!r} is not one of {', '.join(_ACT_FROM_HF)}")
        try:
            return XLNetConfig(
                vocab_size=hf["vocab_size"],
                hidden_size=hf["d_model"],
                num_layers=hf["n_layer"],
                num_heads=hf["n_head"],
                head_size=hf["d_head"],
                intermediate_size=hf["d_inner"],
                hidden_act=_ACT_FROM_HF[act],
                hidden_dropout=hf.get("dropout", 0.1),
                attention_dropout=hf.get("dropout", 0.1),
                mem_len=hf.get("mem_len") or 0,
                clamp_len=hf.get("clamp_len", -1),
                bi_data=hf.get("bi_data", False),
                layer_norm_eps=hf.get("layer_norm_eps", 1e-12),
                initializer_range=hf.get("initializer_range", 0.02),
            )
        except KeyError as missing:
            raise CheckpointError(f"{path}: missing key {missing.args[0]}") from None

    def task_heads(self, hf: dict) -> dict[str, HeadLayout]:
        return {
            "XLNetForSequenceClassification": self.sequence_head(hf),
            "XLNetForTokenClassification": HeadLayout("token", linear_keys("classifier")),
            "XLNetForQuestionAnsweringSimple": HeadLayout("span", linear_keys("qa_outputs")),
            "XLNetForQuestionAnswering": _BEAM_QA,
            "XLNetForMultipleChoice": unmapped(
                "a multiple-choice head, one score per answer option: no task here reads one",
                "sequence_summary.summary",
                "logits_proj",
            ),
        }

    def sequence_head(self, hf: dict) -> HeadLayout:
        """XLNetSequenceSummary + logits_proj: with its defaults (the last token, a hidden-sized projection, tanh)
        the projection is the head's own dense layer; without the projection and with a linear (no) activation
        (``task_config``'s export of a plain linear head), logits_proj alone over the last token; other settings
        compute what our head does not."""
        kind, projected = hf.get("summary_type", "last"), hf.get("summary_use_proj", True)
        activation = hf.get("summary_activation", "tanh")
        plain = activation in _NO_ACTIVATION
        modules = ("sequence_summary.summary", "logits_proj") if projected else ("logits_proj",)
        problem = (
            f"summary_type={kind!r}: it summarises by another position than our XLNet's last token"
            if kind != "last"
            else "summary_proj_to_labels=true: its summary is already the labels"
            if projected and hf.get("summary_proj_to_labels")
            else f"summary_activation={activation!r} over the last token's state, with no dense layer before it"
            if not projected and not plain
            else f"summary_activation={activation!r}: ours applies {' or '.join(_SUMMARY_ACTIVATIONS)}"
            if projected and activation not in _SUMMARY_ACTIVATIONS
            else None
        )
        if problem:
            return unmapped(problem, *modules)
        if not projected:
            return HeadLayout("sequence", linear_keys("logits_proj"), summary="last")
        keys = linear_keys("sequence_summary.summary", "dense") | linear_keys("logits_proj")
        return HeadLayout("sequence", keys, activation=activation, summary="last")

    def task_config(self, activation: str | None) -> dict[str, Any]:
        return {
            "summary_type": "last",
            "summary_use_proj": activation is not None,
            "summary_activation": activation or "linear",  # transformers 5 wants a string: linear is the identity
        }

    def import_state(
        self, state: dict[str, torch.Tensor], config: XLNetConfig, weights_file: Path, folder: Path, **options: Any
    ) -> HFImport:
        hf_reuse_len = (options.get("hf_config") or {}).get("reuse_len")
        renamed = {key.removeprefix(self.prefix): value for key, value in state.items()}
        state.clear()
        state.update(renamed)
        if "r_w_bias" in state:  # untie_r=False: one set of biases for all layers; ours are per layer
            for name in ("r_w_bias", "r_r_bias", "r_s_bias"):
                shared = state.pop(name)
                for i in range(config.num_layers):
                    state[f"layer.{i}.rel_attn.{name}"] = shared[i] if shared.dim() == 3 else shared
        objective_state = {"bias": state.pop("lm_loss.bias")} if "lm_loss.bias" in state else {}
        decoder = state.pop("lm_loss.weight", None)
        if decoder is not None and not torch.equal(decoder, state.get("word_embedding.weight", decoder)):
            raise CheckpointError(f"{weights_file}: lm_loss.weight differs from the word embedding; expected it tied")
        try:
            model_state = _to_ours(state, config)
        except KeyError as missing:
            raise CheckpointError(f"{weights_file}: missing key {missing.args[0]}") from None
        overrides = {"reuse_len": hf_reuse_len} if hf_reuse_len else {}
        return HFImport(
            config, model_state, objective_state, None, objective=self.objective, objective_overrides=overrides
        )

    def export(self, model, objective_state: dict[str, torch.Tensor], objective_config: Any) -> list[ExportPart]:
        config = model.config
        if config.num_heads * _head_size(config) != config.hidden_size:
            raise CheckpointError(
                f"model.head_size={config.head_size} x model.num_heads={config.num_heads} != model.hidden_size="
                f"{config.hidden_size}: transformers' XLNet requires d_head = d_model / n_head, so it cannot load "
                "this model"
            )
        unknown = sorted(set(objective_state) - {"bias"})
        if unknown:
            raise CheckpointError(f"objective state key(s) {some(unknown)} have no place in a Hugging Face XLNet")
        tensors = _to_theirs(model.state_dict(), config)
        if objective_state:
            tensors = {self.prefix + k: v for k, v in tensors.items()} | {"lm_loss.bias": objective_state["bias"]}
        reuse_len = None
        if objective_config is not None:
            reuse_len = (
                objective_config.get("reuse_len") if hasattr(objective_config, "get") else objective_config.reuse_len
            )
        hf_config = {
            "architectures": ["XLNetLMHeadModel" if objective_state else "XLNetModel"],
            "model_type": "xlnet",
            "vocab_size": config.vocab_size,
            "d_model": config.hidden_size,
            "n_layer": config.num_layers,
            "n_head": config.num_heads,
            "d_head": _head_size(config),
            "d_inner": config.intermediate_size,
            "ff_activation": _ACT_TO_HF[choice(config.hidden_act)],
            "dropout": config.hidden_dropout,
            "mem_len": config.mem_len or None,
            "reuse_len": reuse_len,
            "clamp_len": config.clamp_len,
            "bi_data": config.bi_data,
            "attn_type": "bi",
            "untie_r": True,
            "same_length": False,
            "layer_norm_eps": config.layer_norm_eps,
            "initializer_range": config.initializer_range,
            "tie_word_embeddings": True,
        }
        return [ExportPart("", tensors, hf_config)]
