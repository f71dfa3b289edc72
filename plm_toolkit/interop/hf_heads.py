"""Task heads of fine-tuned Hugging Face folders (``BertForSequenceClassification``'s ``classifier``,
``RobertaForQuestionAnswering``'s ``qa_outputs``, ...): the half of their import and export that no family owns.

Each family's adapter lists the heads transformers writes for it (``Adapter.task_heads``: the ``architectures`` name
of config.json -> a ``HeadLayout`` naming the head's keys in the layout of our task heads, ``tasks/heads.py``). On
import, this module takes those keys out of a checkpoint before the adapter reads the backbone, checks their shapes
against config.json and hands them on as a ``TaskHead``; whether a fine-tuning task can start from it is the task's
decision (``tasks/checkpoint_head.py``). Keys of a head the family has in transformers but we do not map (multiple
choice, XLNet's beam-search SQuAD head) are taken too, as a ``TaskHead`` without a kind that says why; any other key
stays in the checkpoint and is reported as unexpected. On export (``task_head_export``), the same layouts run
backwards: the class whose layout computes what a fine-tuned ``TaskHead`` computes gets its keys, and the folder
imports back to that head.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

from plm_toolkit.core.errors import CheckpointError

# What each kind of head scores, for messages.
KINDS = {"sequence": "sequence classifier", "token": "token classifier", "span": "span (start/end) scorer"}
# What a sequence head reads, for messages.
SUMMARIES = {"pooled": "pooled vector", "first": "first token's state", "last": "last token's state"}
# transformers' names for labels nobody named (id2label's default).
_PLACEHOLDER = re.compile(r"LABEL_\d+")


@dataclass(frozen=True)
class HeadLayout:
    """How one transformers task class stores its head."""

    # sequence (one output vector per input, from its summary), token (per token) or span (start and end score per
    # token); None for a head we recognise but do not map.
    kind: str | None
    # Our head's key (``linear.*``; ``dense.*`` for a head with its own dense layer over the summary) -> the
    # checkpoint's; a classifier without a bias (GPT's ``score``) has ``linear.weight`` alone. An unmapped head lists
    # its keys under their own names.
    keys: dict[str, str]
    # Checkpoint keys that are backbone weights in our layout -> the (unprefixed) backbone key the adapter reads:
    # RoBERTa's classifier.dense is our pooler.
    backbone: dict[str, str] = field(default_factory=dict)
    # Activation after the head's own dense layer (``dense.*``): tanh or gelu.
    activation: str | None = None
    # What a sequence head reads: the backbone's pooled vector, or the first or last token's hidden state.
    summary: str | None = None
    # Why no task of ours can start from an unmapped head.
    reason: str = ""
    # Whether the class finds the token it reads as the last one that is not config.json's pad_token_id (GPT's
    # sequence classifiers): an export writes the task's padding id there (``TaskHead.pad_id``).
    by_pad_token: bool = False

    def checkpoint_keys(self) -> set[str]:
        return set(self.keys.values()) | set(self.backbone)


@dataclass(frozen=True)
class TrainedTask:
    """What a plm-finetune checkpoint holds of its task module beside the head (``interop/finetuned_head.py``)."""

    # The task that trained it (its registry name, config.yaml's task.name).
    name: str
    # The task module's attribute whose weights ``TaskHead.state`` holds (``head``; KBQA's ``relation_head``).
    head_name: str
    # The task module's other weights, named as the task names them: finetune.mode=features' scalar mix and biLSTM
    # (``features.*``), KBQA's mention tagger (``mention_head.*``).
    others: dict[str, torch.Tensor] = field(default_factory=dict)
    # finetune.mode=features: the task biLSTM's width per direction and its layers; None without a task encoder.
    encoder: tuple[int, int] | None = None


@dataclass
class TaskHead:
    """The task head of a fine-tuned checkpoint, in the layout of our task heads: a Hugging Face folder's, or a
    plm-finetune checkpoint's (``trained``)."""

    # For messages: the transformers class config.json names (or what the keys suggest); on export, the task that
    # trained the head (task=sst2).
    architecture: str
    # sequence, token or span; None where no task of ours can use it (``reason`` says why).
    kind: str | None
    # Our head's weights: linear.weight, linear.bias (but for a classifier without one), and dense.{weight,bias}
    # with ``activation``.
    state: dict[str, torch.Tensor]
    # The weights file, and our key -> the checkpoint's key (every key the head took, backbone ones included).
    source: Path
    source_keys: dict[str, str]
    activation: str | None = None
    summary: str | None = None
    # Class names in output order (config.json's id2label); None where they are transformers' LABEL_i placeholders.
    labels: list[str] | None = None
    # config.json's problem_type (regression, single_label_classification, multi_label_classification), if any.
    problem_type: str | None = None
    reason: str = ""
    # On export, the id that pads the task's inputs and never ends a text (``checkpoint_head.export_pad_id``): what
    # a class that reads the last token other than config.json's pad_token_id gets there.
    pad_id: int | None = None
    # A plm-finetune checkpoint's: its task and the rest of its task module; None for a Hugging Face folder's head.
    trained: TrainedTask | None = None

    @property
    def has_bias(self) -> bool:
        return "linear.bias" in self.state

    @property
    def num_outputs(self) -> int:
        return int(self.state["linear.weight"].shape[0])

    def unused(self, why: str, then: str) -> str:
        """The one line that says this head goes unused: the file, its keys and why (keys the backbone took,
        RoBERTa's classifier.dense as the pooler, are named as kept)."""
        others = self.trained.others if self.trained is not None else {}
        keys = sorted(self.source_keys[ours] for ours in self.state) + sorted(others)
        keys = ", ".join(keys) if len(keys) <= 6 else f"{', '.join(keys[:6])} and {len(keys) - 6} more"
        kept = sorted((theirs, ours) for ours, theirs in self.source_keys.items() if ours not in self.state)
        if kept:
            then += f"; {', '.join(t for t, _ in kept)} stay in the backbone as {', '.join(o for _, o in kept)}"
        return f"{self.source}: task head {keys} not used ({why}); {then}"


def label_names(hf: dict) -> list[str] | None:
    """config.json's id2label in id order; None when absent or transformers' placeholders (LABEL_0, ...)."""
    table = hf.get("id2label") or {}
    try:
        names = [str(table[key]) for key in sorted(table, key=int)]
    except (TypeError, ValueError):
        return None
    if not names or all(_PLACEHOLDER.fullmatch(name) for name in names):
        return None
    return names


def _layout_of(layouts: dict[str, HeadLayout], present: set[str], hf: dict) -> tuple[str, HeadLayout | None]:
    """The layout config.json's architectures names; without one, the layout whose keys are those present, when
    every such layout means the same (BERT's sequence and token classifiers share their key names)."""
    named = [name for name in hf.get("architectures") or [] if name in layouts]
    if named:
        return named[0], layouts[named[0]]
    fits = {name: layout for name, layout in layouts.items() if layout.checkpoint_keys() == present}
    meanings = {(layout.kind, layout.summary, layout.activation) for layout in fits.values()}
    if len(meanings) == 1 and next(iter(meanings))[0] is not None:
        name = sorted(fits)[0]
        return name, fits[name]
    if not fits:
        return "", None
    names = " or ".join(sorted(fits))
    reason = f"config.json's architectures does not say which of {names} wrote it"
    return names, HeadLayout(None, {key: key for key in present}, reason=reason)


def take_task_head(
    layouts: dict[str, HeadLayout], state: dict[str, torch.Tensor], hf: dict, hidden_size: int, path: Path
) -> TaskHead | None:
    """Take the task head's keys out of ``state`` (a backbone key it supplies is put back under the backbone's
    name); None when the checkpoint has none. CheckpointError naming the file and key for a missing key or a
    tensor whose shape config.json contradicts."""
    known = set().union(*(layout.checkpoint_keys() for layout in layouts.values())) if layouts else set()
    present = known & set(state)
    if not present:
        return None
    architecture, layout = _layout_of(layouts, present, hf)
    if layout is None:
        return None  # a part of some head only: its keys are reported as unexpected
    missing = sorted(layout.checkpoint_keys() - set(state))
    if missing:
        raise CheckpointError(f"{path}: missing key(s) {', '.join(missing)} of the {architecture} head")
    if layout.kind is None:
        taken = {key: state.pop(key) for key in sorted(layout.checkpoint_keys())}
        return TaskHead(architecture, None, taken, path, {key: key for key in taken}, reason=layout.reason)
    for theirs, ours in layout.backbone.items():
        if ours in state:
            raise CheckpointError(f"{path}: holds both {ours} and {theirs}, which {architecture} stores as one")
        state[ours] = state.pop(theirs)
    head = TaskHead(
        architecture,
        layout.kind,
        {ours: state.pop(theirs) for ours, theirs in layout.keys.items()},
        path,
        dict(layout.keys) | {ours: theirs for theirs, ours in layout.backbone.items()},
        activation=layout.activation,
        summary=layout.summary,
        labels=label_names(hf),
        problem_type=hf.get("problem_type"),
    )
    _check_shapes(head, hf, hidden_size)
    return head


def _check_shapes(head: TaskHead, hf: dict, hidden_size: int) -> None:
    """linear (n, H) with n = 2 for a span head, else config.json's label count (id2label's, else num_labels, else
    transformers' default of 2, which transformers 5 leaves unwritten); dense (H, H)."""
    if head.kind == "span":
        outputs, why = 2, "a start and an end score"
    elif hf.get("id2label"):
        outputs, why = len(hf["id2label"]), f"config.json's id2label has {len(hf['id2label'])} label(s)"
    else:
        outputs = int(hf.get("num_labels", 2))
        why = f"config.json's num_labels is {outputs}" if "num_labels" in hf else "transformers' default of 2 labels"
    expected = {"linear.weight": (outputs, hidden_size)}
    if head.has_bias:
        expected["linear.bias"] = (outputs,)
    if "dense.weight" in head.state:
        expected |= {"dense.weight": (hidden_size, hidden_size), "dense.bias": (hidden_size,)}
    for ours, shape in expected.items():
        if tuple(head.state[ours].shape) != shape:
            raise CheckpointError(
                f"{head.source}: {head.source_keys[ours]} has shape {tuple(head.state[ours].shape)}; expected "
                f"{shape} ({why}; hidden size {hidden_size})"
            )


def linear_keys(theirs: str, ours: str = "linear") -> dict[str, str]:
    """Our ``linear.*`` (or ``dense.*``: a head's own dense layer over the summary) -> a transformers ``nn.Linear``
    named ``theirs``."""
    return {f"{ours}.{p}": f"{theirs}.{p}" for p in ("weight", "bias")}


def unmapped(reason: str, *modules: str, weights_only: tuple[str, ...] = ()) -> HeadLayout:
    """A head we recognise but do not map: the weights and biases of its ``modules`` (and the weight alone of each of
    ``weights_only``), and why."""
    keys = [f"{module}.{p}" for module in modules for p in ("weight", "bias")] + [f"{m}.weight" for m in weights_only]
    return HeadLayout(None, {key: key for key in keys}, reason=reason)


# --- export ----------------------------------------------------------------------------------------------------


def describe(kind: str, summary: str | None, activation: str | None, bias: bool = True) -> str:
    """What a head computes, in words: "a sequence classifier with its own dense layer and gelu over the first
    token's state"."""
    what = f"a {KINDS[kind]}" + ("" if bias else " without a bias")
    if activation is not None:
        what += f" with its own dense layer and {activation}"
    return what + (f" over the {SUMMARIES[summary]}" if summary is not None else "")


def task_head_export(adapter, model, head: TaskHead) -> tuple[dict[str, torch.Tensor], dict]:
    """The tensors and config.json of the transformers task class of ``adapter``'s family that holds ``head`` over
    ``model``: the inverse of ``take_task_head`` over the same layouts, so that the folder imports back to this head.
    CheckpointError where no class of the family computes what the head does."""
    (bare,) = adapter.export(model, {}, None)  # the bare model, checked as a backbone export is
    settings = adapter.task_config(head.activation) if head.kind == "sequence" else {}
    hf = bare.hf_config | settings | label_config(head)
    name, layout = layout_for(adapter.task_heads(hf), head, adapter.model_type)
    hf["architectures"] = [name]
    if layout.by_pad_token:
        if head.pad_id is None:
            raise CheckpointError(f"{head.source}: {name} needs config.json's pad_token_id; no padding id is known")
        hf["pad_token_id"] = head.pad_id
    return put_task_head(layout, head, bare.tensors, adapter.prefix, set(adapter.pooler.values())), hf


def layout_for(layouts: dict[str, HeadLayout], head: TaskHead, model_type: str) -> tuple[str, HeadLayout]:
    """The class whose layout computes what ``head`` does: its kind, summary, dense layer and activation."""

    def computes(layout: HeadLayout | TaskHead) -> tuple:
        bias = "linear.bias" in (layout.keys if isinstance(layout, HeadLayout) else layout.state)
        return layout.kind, layout.summary if layout.kind == "sequence" else None, layout.activation, bias

    ours = computes(head)
    for name, layout in layouts.items():
        if computes(layout) == ours and set(layout.keys) == set(head.state):
            return name, layout
    same = [f"{name} is {describe(*computes(layout))}" for name, layout in layouts.items() if layout.kind == head.kind]
    theirs = "; ".join(same) or f"no {KINDS[head.kind]} class of {model_type} is mapped here"
    # A sequence head over the same summary that plm-finetune can train instead: the key that makes it.
    trainable = [
        computes(layout)
        for layout in layouts.values()
        if layout.kind == head.kind == "sequence" and layout.summary == head.summary
    ]
    keys = []
    if trainable and head.activation is None and trainable[0][2] is not None:
        keys.append(f"task.head_activation={trainable[0][2]}")
    if trainable and head.has_bias and not trainable[0][3]:
        keys.append("task.head_bias=false")
    if keys:
        theirs += f" (plm-finetune {' '.join(keys)} trains that head)"
    raise CheckpointError(
        f"{head.source}: {head.architecture}'s head is {describe(*ours)}, which no transformers {model_type} class "
        f"computes; {theirs}"
    )


def put_task_head(
    layout: HeadLayout, head: TaskHead, backbone: dict[str, torch.Tensor], prefix: str, pooler: set[str]
) -> dict[str, torch.Tensor]:
    """The tensors of a task class of ``layout``: the bare model's (``backbone``, the family's names unprefixed)
    under ``prefix``, and the head's. A backbone key the layout takes into the head (RoBERTa's pooler as
    classifier.dense) moves there; the ``pooler`` keys stay only where the head reads the pooled vector, as
    transformers' token and span classes build their backbone without a pooler."""
    into_head = {ours: theirs for theirs, ours in layout.backbone.items()}
    keep_pooler = layout.summary == "pooled"
    tensors = {}
    for key, value in backbone.items():
        if key in into_head:
            tensors[into_head[key]] = value
        elif keep_pooler or key not in pooler:
            tensors[prefix + key] = value
    return tensors | {theirs: head.state[ours] for ours, theirs in layout.keys.items()}


def label_config(head: TaskHead) -> dict:
    """config.json's label keys for ``head``: id2label and label2id with its label names (transformers' LABEL_i where
    it has none, as a regression's one output), and its problem_type; none for a span scorer (transformers' default
    of two outputs, start and end)."""
    if head.kind == "span":
        return {}
    names = head.labels or [f"LABEL_{i}" for i in range(head.num_outputs)]
    if len(names) != head.num_outputs:
        raise CheckpointError(
            f"{head.source}: {head.source_keys['linear.weight']} scores {head.num_outputs} label(s); "
            f"{head.architecture} names {len(names)} ({', '.join(names)})"
        )
    hf = {"id2label": {str(i): name for i, name in enumerate(names)}, "label2id": {n: i for i, n in enumerate(names)}}
    return hf | ({"problem_type": head.problem_type} if head.problem_type else {})
