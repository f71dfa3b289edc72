"""The task head of a plm-finetune checkpoint, read as a ``TaskHead`` (``interop/hf_heads.py``) like a fine-tuned
Hugging Face folder's, so that one rule decides whether a fine-tuning task starts from it (``tasks/checkpoint_head.py``)
and plm-export writes it as a transformers task class.

plm-finetune saves the task module in objective.safetensors: its head under the task's ``head_name`` (``head.linear.*``,
``head.dense.*``; KBQA's relation classifier ``relation_head.*``) and the rest beside it (finetune.mode=features'
scalar mix and biLSTM, ``features.*``; KBQA's mention tagger). config.yaml names the task and its labels (``task``),
the backbone's architecture (``backbone``) and what the head's weights do not show (``task_head``: the activation of
its dense layer). An encoder-decoder's task has no weights of its own: the fine-tuned model is the whole of it.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
from omegaconf import DictConfig
from torch import nn

from plm_toolkit.config.resolve import task_class
from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core.errors import CheckpointError
from plm_toolkit.core.registry import TASKS
from plm_toolkit.core.weights import read_weights
from plm_toolkit.interop.hf_heads import TaskHead, TrainedTask
from plm_toolkit.models.base import ENCODER_DECODER

# The section of a fine-tuned checkpoint's config.yaml that holds what its head's weights do not show.
HEAD_SECTION = "task_head"
# The recurrent weights of each layer of a task encoder's biLSTM (finetune.mode=features): (4 x width, width).
_LSTM_LAYER = re.compile(r"features\.lstm\.weight_hh_l(\d+)")


def read_finetuned_head(step: Path, saved: DictConfig, model: nn.Module) -> TaskHead | None:
    """The task module of the plm-finetune checkpoint ``step`` (``saved``: its config.yaml) over its backbone
    ``model``, as a TaskHead whose ``trained`` names the task; None for a checkpoint without a task section
    (plm-train's). CheckpointError naming the file for a task unknown here, a missing or unreadable
    objective.safetensors, a head whose tensors are missing, or a tensor of a shape that config.yaml contradicts."""
    section = saved.get("task")
    if section is None:
        return None
    config_file = step / ckpt.CONFIG_FILE
    name = section.get("name")
    if name not in TASKS:
        known = ", ".join(TASKS.names())
        raise CheckpointError(f"{config_file}: task.name={name} is no task known here; known: {known}")
    path = step / ckpt.OBJECTIVE_FILE
    state = read_weights(path)
    regression = bool(section.get("regression", False))
    labels = [] if regression else [str(label) for label in section.get("labels") or []]
    where = f"task={name}"
    if ENCODER_DECODER in type(model).capabilities:
        if state:
            raise CheckpointError(
                f"{path}: unexpected key(s) {', '.join(sorted(state)[:5])}: {where} on an encoder-decoder has no "
                "weights of its own"
            )
        reason = "an encoder-decoder's fine-tuned model is the whole of it"
        return TaskHead(where, None, {}, path, {}, labels=labels or None, reason=reason, trained=TrainedTask(name, ""))
    cls = task_class(name)
    head_name = getattr(cls, "head_name", "head")
    prefix = f"{head_name}."
    head_state = {key.removeprefix(prefix): value for key, value in state.items() if key.startswith(prefix)}
    others = {key: value for key, value in state.items() if not key.startswith(prefix)}
    activation = (saved.get(HEAD_SECTION) or {}).get("activation")
    needed = ["linear.weight"] + (["dense.weight", "dense.bias"] if activation is not None else [])
    missing = [prefix + key for key in needed if key not in head_state]
    if missing:
        raise CheckpointError(
            f"{path}: missing key(s) {', '.join(missing)} of {where}'s head (a damaged checkpoint, or an "
            "objective.safetensors from another run)"
        )
    if "dense.weight" in head_state and activation is None:
        raise CheckpointError(
            f"{config_file}: {HEAD_SECTION}.activation={activation} does not fit the head of {path}, which has a "
            f"dense layer of its own ({prefix}dense.*)"
        )
    encoder = _encoder(others)
    width = 2 * encoder[0] if encoder is not None else int(getattr(model, "representation_size", 0))
    kind = getattr(cls, "head_kind", None)
    outputs, why = _outputs(kind, regression, labels)
    expected = {"linear.weight": (outputs, width), "linear.bias": (outputs,)}
    expected |= {"dense.weight": (width, width), "dense.bias": (width,)}
    reads = f"a task encoder of width {width}" if encoder is not None else f"hidden size {width}"
    for key, value in head_state.items():
        if key in expected and tuple(value.shape) != expected[key]:
            raise CheckpointError(
                f"{path}: {prefix}{key} has shape {tuple(value.shape)}; expected {expected[key]} ({why} in "
                f"{config_file}; {reads})"
            )
    problem = ("regression" if regression else "single_label_classification") if kind == "sequence" else None
    return TaskHead(
        where,
        kind,
        head_state,
        path,
        {key: prefix + key for key in head_state},
        activation=activation,
        labels=labels or None,
        problem_type=problem,
        trained=TrainedTask(name, head_name, others, encoder),
    )


def _encoder(others: dict[str, torch.Tensor]) -> tuple[int, int] | None:
    """(width per direction, layers) of the task encoder whose biLSTM weights ``others`` holds, or None."""
    layers = [key for key in others if _LSTM_LAYER.fullmatch(key)]
    if not layers:
        return None
    return int(others["features.lstm.weight_hh_l0"].shape[-1]), len(layers)


def _outputs(kind: str | None, regression: bool, labels: list[str]) -> tuple[int, str]:
    """How many outputs the head has, and why, for messages."""
    if kind == "span":
        return 2, "a start and an end score"
    if regression:
        return 1, "one number: task.regression=true"
    return len(labels), f"{len(labels)} label(s) in task.labels"
