"""Hugging Face adapters of GPT (``openai-gpt``: ``OpenAIGPTModel`` / ``OpenAIGPTLMHeadModel``) and GPT-2 (``gpt2``:
``GPT2Model`` / ``GPT2LMHeadModel``).

Both store their linear maps as ``Conv1D`` weights of shape (in, out), the transpose of ``nn.Linear``'s, and the
attention's query, key and value as one (H, 3H) matrix ``c_attn`` that ours keeps as three:

=============================================  ===========================================================
ours (``models/gpt.py``)                       GPT-2 (GPT: ``tokens_embed``, ``positions_embed``; no ``ln_f``)
=============================================  ===========================================================
``embeddings.word_embeddings.weight``          ``wte.weight``
``embeddings.position_embeddings.weight``      ``wpe.weight``
``layers.i.attention.{query,key,value}``       ``h.i.attn.c_attn`` split in three along its output, transposed
``layers.i.attention.output``                  ``h.i.attn.c_proj`` transposed
``layers.i.attention_layer_norm``              ``h.i.ln_1`` (before the attention in GPT-2, after it in GPT)
``layers.i.feed_forward.intermediate/output``  ``h.i.mlp.c_fc`` / ``h.i.mlp.c_proj`` transposed
``layers.i.output_layer_norm``                 ``h.i.ln_2``
``final_layer_norm``                           ``ln_f``
=============================================  ===========================================================

The LM head (``lm_head.weight``) is the token embedding: no key of its own and no bias, which is the ``clm``
objective's layout for this family (an empty state). The LM-head models prefix the backbone with ``transformer.``.

Task heads (``task_heads``): GPT-2's ``classifier`` over every token and ``qa_outputs`` map onto our token and span
heads; both families' sequence classifier ``score`` is a linear map without a bias over every token, whose logits
transformers takes at the last token that is not config.json's pad_token_id. Our sequence head reads the last real
token too (the attention mask's), so ``score`` is our head without a bias (``task.head_bias``), and an export
writes the task's padding id as pad_token_id (``checkpoint_head.export_pad_id``: not GPT-2's <|endoftext|>, which
ends every text). The double-heads models' multiple-choice head is recognised and left out: no task here reads one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import torch

from plm_toolkit.core.choices import choice
from plm_toolkit.core.errors import CheckpointError
from plm_toolkit.interop.hf import (
    ACT_FROM_HF,
    ADAPTERS,
    Adapter,
    ExportPart,
    HFImport,
    activation_from_hf,
    config_values,
    drop_tied,
    some,
    take,
)
from plm_toolkit.interop.hf_heads import HeadLayout, TaskHead, linear_keys, unmapped
from plm_toolkit.interop.hf_tokenizer import WITHOUT_TOKEN_TYPES, TokenizerLayout
from plm_toolkit.models.gpt import GPT2Config, GPTConfig

_LINEAR = {
    "attention.output": "attn.c_proj",
    "feed_forward.intermediate": "mlp.c_fc",
    "feed_forward.output": "mlp.c_proj",
}
_NORMS = {"attention_layer_norm": "ln_1", "output_layer_norm": "ln_2"}
_QKV = ("query", "key", "value")
# transformers' openai-gpt afn: its "gelu" is the tanh approximation (gelu_new).
_GPT_ACT_FROM_HF = {"gelu": "gelu_tanh", "gelu_new": "gelu_tanh", "relu": "relu"}
_GPT_ACT_TO_HF = {"gelu_tanh": "gelu", "relu": "relu"}
_GPT2_ACT_TO_HF = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu"}


def gpt_task_heads(name: str, token_and_span: bool) -> dict[str, HeadLayout]:
    """The task heads transformers writes for the family whose classes ``name`` prefixes; GPT-2 also has token and
    span classes (transformers' OpenAIGPT has neither)."""
    heads = {
        f"{name}ForSequenceClassification": HeadLayout(
            "sequence", {"linear.weight": "score.weight"}, summary="last", by_pad_token=True
        ),
        f"{name}DoubleHeadsModel": unmapped(
            "a multiple-choice head, one score per answer option: no task here reads one",
            "multiple_choice_head.summary",
        ),
    }
    if token_and_span:
        heads[f"{name}ForTokenClassification"] = HeadLayout("token", linear_keys("classifier"))
        heads[f"{name}ForQuestionAnswering"] = HeadLayout("span", linear_keys("qa_outputs"))
    return heads


class GPTFamilyAdapter(Adapter):
    objective = "clm"
    # Hugging Face names of the embeddings and config keys that differ between the two.
    words: ClassVar[str]
    positions: ClassVar[str]
    architectures: ClassVar[tuple[str, str]]  # (bare model, LM head model)
    dropout_keys = {
        "hidden_dropout": "resid_pdrop",
        "attention_dropout": "attn_pdrop",
        "embedding_dropout": "embd_pdrop",
    }
    # The task heads of fine-tuned releases (``gpt_task_heads``).
    task_layouts: ClassVar[dict[str, HeadLayout]] = {}

    def task_heads(self, hf: dict) -> dict[str, HeadLayout]:
        return self.task_layouts

    def tokenizer_layout(self, task_head: TaskHead | None) -> TokenizerLayout:
        """A language model's export encodes a prompt alone and pads it on the left, as plm-generate does (and
        transformers' GPT tokenizers, which add no special tokens); a task class's keeps the run's template (GPT-2's
        ``A <|endoftext|>``: the head reads that last token) and its right padding. Neither returns token_type_ids,
        which transformers' GPT models would add as token embeddings."""
        if task_head is None:
            return TokenizerLayout(padding_side="left", model_input_names=WITHOUT_TOKEN_TYPES, template=False)
        return TokenizerLayout(model_input_names=WITHOUT_TOKEN_TYPES)

    def names(self, config: GPTConfig) -> dict[str, str]:
        """Our keys -> theirs for everything but the fused q, k, v (without the ``transformer.`` prefix)."""
        names = {
            "embeddings.word_embeddings.weight": f"{self.words}.weight",
            "embeddings.position_embeddings.weight": f"{self.positions}.weight",
        }
        for i in range(config.num_layers):
            for ours, theirs in (_LINEAR | _NORMS).items():
                for param in ("weight", "bias"):
                    names[f"layers.{i}.{ours}.{param}"] = f"h.{i}.{theirs}.{param}"
        if config.final_layer_norm:
            names |= {f"final_layer_norm.{p}": f"ln_f.{p}" for p in ("weight", "bias")}
        return names

    def shared_config(self, hf: dict, path: Path) -> dict[str, Any]:
        fields = config_values(
            hf,
            {
                "vocab_size": "vocab_size",
                "hidden_size": "n_embd",
                "num_layers": "n_layer",
                "num_heads": "n_head",
                "max_position_embeddings": "n_positions",
            },
            path,
        )
        fields |= {ours: hf.get(theirs, 0.1) for ours, theirs in self.dropout_keys.items()}
        return fields | {
            "layer_norm_eps": hf.get("layer_norm_epsilon", 1e-5),
            "initializer_range": hf.get("initializer_range", 0.02),
        }

    def shared_hf(self, config: GPTConfig, architecture: str) -> dict[str, Any]:
        hf = {theirs: getattr(config, ours) for ours, theirs in self.dropout_keys.items()}
        return hf | {
            "architectures": [architecture],
            "model_type": self.model_type,
            "vocab_size": config.vocab_size,
            "n_embd": config.hidden_size,
            "n_layer": config.num_layers,
            "n_head": config.num_heads,
            "n_positions": config.max_position_embeddings,
            "layer_norm_epsilon": config.layer_norm_eps,
            "initializer_range": config.initializer_range,
            "tie_word_embeddings": True,
        }

    def import_state(
        self, state: dict[str, torch.Tensor], config: GPTConfig, weights_file: Path, folder: Path, **options: Any
    ) -> HFImport:
        prefix = "transformer." if any(k.startswith("transformer.") for k in state) else ""
        if f"{prefix}{self.words}.weight" not in state and "lm_head.weight" in state:
            # transformers' OpenAIGPTDoubleHeadsModel ties the embedding to its LM head and saves the head's copy alone
            state[f"{prefix}{self.words}.weight"] = state.pop("lm_head.weight")
        words = state.get(f"{prefix}{self.words}.weight")
        drop_tied(state, "lm_head.weight", words, weights_file)
        for key in [k for k in state if k.endswith((".attn.bias", ".attn.masked_bias")) or k.endswith("position_ids")]:
            state.pop(key)  # causal-mask and position buffers older releases saved
        names = self.names(config)
        fused = {i: f"h.{i}.attn.c_attn" for i in range(config.num_layers)}
        wanted = [prefix + t for t in names.values()] + [
            f"{prefix}{c}.{p}" for c in fused.values() for p in ("weight", "bias")
        ]
        missing = [key for key in wanted if key not in state]
        if missing:
            raise CheckpointError(f"{weights_file}: missing key(s) {some(missing)}")
        ours = take(state, names, weights_file, prefix)
        for ours_key in list(ours):
            if ours_key.endswith(".weight") and any(f".{m}." in f".{ours_key}" for m in _LINEAR):
                ours[ours_key] = ours[ours_key].T  # Conv1D (in, out) -> Linear (out, in)
        for i, theirs in fused.items():
            weights = state.pop(f"{prefix}{theirs}.weight").T.chunk(3, dim=0)  # (H, 3H) -> 3 x (H, H)
            biases = state.pop(f"{prefix}{theirs}.bias").chunk(3)  # (3H,) -> 3 x (H,)
            for name, weight, bias in zip(_QKV, weights, biases, strict=True):
                ours[f"layers.{i}.attention.{name}.weight"] = weight
                ours[f"layers.{i}.attention.{name}.bias"] = bias
        return HFImport(config, ours, {}, None, objective=self.objective, source_keys=names)

    def export(self, model, objective_state: dict[str, torch.Tensor], objective_config: Any) -> list[ExportPart]:
        config = model.config
        self.check_layout(config)
        if objective_state:
            raise CheckpointError(
                f"objective state key(s) {some(sorted(objective_state))}: transformers' {self.model_type} LM head is "
                "the token embedding alone (no bias)"
            )
        state = model.state_dict()
        tensors = {}
        for ours, theirs in self.names(config).items():
            linear = ours.endswith(".weight") and any(f".{m}." in f".{ours}" for m in _LINEAR)
            tensors[theirs] = state[ours].T if linear else state[ours]  # Linear (out, in) -> Conv1D (in, out)
        for i in range(config.num_layers):
            qkv = [state[f"layers.{i}.attention.{name}.weight"] for name in _QKV]
            tensors[f"h.{i}.attn.c_attn.weight"] = torch.cat(qkv, dim=0).T  # (3H, H) -> (H, 3H)
            tensors[f"h.{i}.attn.c_attn.bias"] = torch.cat([state[f"layers.{i}.attention.{n}.bias"] for n in _QKV])
        # Written as the LM-head model: the head is the tied embedding, so the bare weights are the whole of it.
        tensors = {"transformer." + k: v for k, v in tensors.items()}
        return [ExportPart("", tensors, self.config_to_hf(config, self.architectures[1]))]

    def check_layout(self, config: GPTConfig) -> None:
        raise NotImplementedError

    def config_to_hf(self, config: GPTConfig, architecture: str) -> dict[str, Any]:
        raise NotImplementedError


@ADAPTERS.register
class GPT2Adapter(GPTFamilyAdapter):
    model_type = "gpt2"
    family = "gpt2"
    words, positions = "wte", "wpe"
    architectures = ("GPT2Model", "GPT2LMHeadModel")
    task_layouts = gpt_task_heads("GPT2", token_and_span=True)

    def config_from_hf(self, hf: dict, path: Path) -> GPT2Config:
        unsupported = {
            "scale_attn_weights": True,
            "scale_attn_by_inverse_layer_idx": False,
            "add_cross_attention": False,
        }
        for key, value in unsupported.items():
            if hf.get(key, value) != value:
                raise CheckpointError(f"{path}: {key}={hf[key]} is not supported (only {value})")
        fields = self.shared_config(hf, path)
        inner = hf.get("n_inner") or 4 * fields["hidden_size"]
        act = activation_from_hf(hf, "activation_function", path, ACT_FROM_HF)
        return GPT2Config(**fields, intermediate_size=inner, hidden_act=act)

    def check_layout(self, config: GPTConfig) -> None:
        if not (config.pre_norm and config.final_layer_norm):
            raise CheckpointError("model.pre_norm and model.final_layer_norm must be true for a GPT-2 checkpoint")

    def config_to_hf(self, config: GPTConfig, architecture: str) -> dict[str, Any]:
        return self.shared_hf(config, architecture) | {
            "n_inner": config.intermediate_size,
            "activation_function": _GPT2_ACT_TO_HF[choice(config.hidden_act)],
            "scale_attn_weights": True,
        }


@ADAPTERS.register
class OpenAIGPTAdapter(GPTFamilyAdapter):
    model_type = "openai-gpt"
    family = "gpt"
    words, positions = "tokens_embed", "positions_embed"
    architectures = ("OpenAIGPTModel", "OpenAIGPTLMHeadModel")
    task_layouts = gpt_task_heads("OpenAIGPT", token_and_span=False)

    def config_from_hf(self, hf: dict, path: Path) -> GPTConfig:
        fields = self.shared_config(hf, path)
        act = activation_from_hf(hf, "afn", path, _GPT_ACT_FROM_HF)
        # transformers' OpenAIGPT has no n_inner: the feed-forward is always 4 x n_embd.
        return GPTConfig(**fields, intermediate_size=4 * fields["hidden_size"], hidden_act=act)

    def check_layout(self, config: GPTConfig) -> None:
        if config.pre_norm or config.final_layer_norm:
            raise CheckpointError("model.pre_norm and model.final_layer_norm must be false for a GPT checkpoint")
        if config.intermediate_size != 4 * config.hidden_size:
            raise CheckpointError(
                f"model.intermediate_size={config.intermediate_size}: transformers' OpenAIGPT fixes it at 4 x "
                f"model.hidden_size = {4 * config.hidden_size}"
            )
        if choice(config.hidden_act) not in _GPT_ACT_TO_HF:
            raise CheckpointError(
                f"model.hidden_act={choice(config.hidden_act)}: transformers' OpenAIGPT offers only "
                f"{', '.join(_GPT_ACT_TO_HF)}"
            )

    def config_to_hf(self, config: GPTConfig, architecture: str) -> dict[str, Any]:
        return self.shared_hf(config, architecture) | {"afn": _GPT_ACT_TO_HF[choice(config.hidden_act)]}
