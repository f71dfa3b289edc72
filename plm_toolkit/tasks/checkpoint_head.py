"""Start a task's head from a fine-tuned checkpoint's, as transformers' ``from_pretrained`` does, or say why not.

A fine-tuned Hugging Face folder brings its task head (``interop/hf_heads.py``: ``TaskHead``). It starts the task's
head when both compute the same function: the same kind (a sequence classifier for the GLUE tasks and
task=classification, a token classifier for NER, a span scorer for SQuAD), the same summary of the sequence (the
backbone's pooled vector, or the first or last token), the same number of outputs, and labels that agree. Labels
that config.json's id2label names are matched to the task's by name (case aside), and the head's rows reordered to
the task's order; names that share nothing with the task's (NEGATIVE/POSITIVE against SST-2's 0/1) are taken in
order, as transformers takes them, with a warning that spells out the pairing; names that differ in part refuse
the head. Otherwise the task keeps its fresh head and one warning line names the file, the unused keys and why.

The other way, for plm-export: ``finetuned_head`` reads a plm-finetune checkpoint's head as a ``TaskHead`` (its
weights, the task's kind and labels, the summary its backbone gives, and the activation of the head's own dense
layer that plm-finetune records in config.yaml, ``head_record``), which ``interop.hf.export_hf`` writes as the
transformers task class that computes the same.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from omegaconf import DictConfig
from torch import nn

from plm_toolkit import checkpoint as ckpt
from plm_toolkit.config.validate import task_class
from plm_toolkit.data.tokenizer import BYTE_STAND_INS
from plm_toolkit.data.vocab import Vocab
from plm_toolkit.errors import CheckpointError
from plm_toolkit.interop.hf import some
from plm_toolkit.interop.hf_heads import KINDS, SUMMARIES, TaskHead
from plm_toolkit.tasks.base import summary_kind

log = logging.getLogger("plm_toolkit")

# The section of a fine-tuned checkpoint's config.yaml that holds what its head's weights do not show.
HEAD_SECTION = "task_head"
POOLER_KEYS = ("pooler.dense.weight", "pooler.dense.bias")


def start_from_checkpoint_head(
    task: nn.Module, model: nn.Module, head: TaskHead | None, initialized_keys: list[str] = ()
) -> bool:
    """Load ``head`` into ``task.head`` when it computes what the task's head computes; else warn, in one line, and
    keep the fresh head. Returns whether the head was loaded."""
    if head is None:
        return False
    name = f"task={task.config.name}"
    rows, problem = fit(task, model, head)
    if problem is not None:
        fresh = "a fresh head"
        if getattr(task, "head_kind", None) == "sequence" and set(POOLER_KEYS) & set(initialized_keys):
            fresh += " and a fresh pooler (the checkpoint has none)"
        log.warning(head.unused(problem, f"{name} starts from {fresh}"))
        return False
    state = dict(head.state)
    if rows is not None:
        index = torch.tensor(rows)
        state = {key: value[index] if key.startswith("linear.") else value for key, value in state.items()}
    if head.activation is not None:
        task.head.add_dense(head.activation)
    if "linear.bias" not in state:  # transformers' GPT score: none, or a zero one where task.head_bias=true
        if getattr(task.config, "head_bias", None) is None:
            task.head.drop_bias()
        elif task.head.linear.bias is not None:
            state["linear.bias"] = torch.zeros_like(task.head.linear.bias)
    task.head.load_state_dict(state)
    log.info("%s starts from the %s head of %s", name, head.architecture, head.source)
    return True


def fit(task: nn.Module, model: nn.Module, head: TaskHead) -> tuple[list[int] | None, str | None]:
    """(the checkpoint's row for each of the task's outputs, or None to keep them in order; why the head cannot
    serve the task, or None)."""
    name = f"task={task.config.name}"
    wanted = getattr(task, "head_kind", None)
    if head.kind is None:
        return None, head.reason
    if wanted is None:
        return None, f"{name} has no head that reads the encoder's states"
    if head.kind != wanted:
        return None, f"{head.architecture} is a {KINDS[head.kind]}; {name} needs a {KINDS[wanted]}"
    if getattr(task, "features", None) is not None:
        return None, "finetune.mode=features puts a task encoder between the backbone and the head"
    if wanted == "span":
        return None, None
    activation = getattr(task.config, "head_activation", None)
    if activation is not None and head.activation != activation:
        has = "no dense layer" if head.activation is None else f"a dense layer with {head.activation}"
        return None, f"it has {has} of its own; task.head_activation={activation} asks for one with {activation}"
    if getattr(task.config, "head_bias", None) is False and "linear.bias" in head.state:
        return None, "its classifier has a bias; task.head_bias=false asks for one without"
    if wanted == "sequence":
        ours = summary_kind(model)
        if head.summary != ours:
            return None, f"it reads the {SUMMARIES[head.summary]}, {name} on this backbone the {SUMMARIES[ours]}"
        if head.problem_type == "multi_label_classification":
            return None, f"a multi-label classifier (a sigmoid per label); {name} picks one label"
    regression = bool(getattr(task.config, "regression", False))
    count = 1 if regression else len(task.labels)
    if head.num_outputs != count:
        if regression:
            return None, f"{head.num_outputs} labels in the checkpoint; {name} predicts one number (task.regression)"
        if head.num_outputs == 1:
            return None, f"a regression head (one output) in the checkpoint, {count} labels in {name}"
        return None, f"{head.num_outputs} labels in the checkpoint, {count} in {name}"
    if regression:
        return None, None
    return match_labels(head, list(task.labels), name)


def match_labels(head: TaskHead, ours: list[str], name: str) -> tuple[list[int] | None, str | None]:
    """The checkpoint's row for each task label, matched by name (case aside); None to take them in order."""
    theirs = head.labels
    if theirs is None or theirs == ours:
        return None, None
    folded = [label.casefold() for label in theirs]
    wanted = [label.casefold() for label in ours]
    if len(set(folded)) == len(folded) and set(folded) == set(wanted):
        rows = [folded.index(label) for label in wanted]
        log.info("%s: its labels are %s's in another order; the head's rows follow the task's", head.source, name)
        return rows, None
    if not set(folded) & set(wanted):
        pairs = ", ".join(f"{a}={b}" for a, b in zip(theirs, ours, strict=True))
        log.warning(
            "%s: the checkpoint's labels share no name with %s's; they are taken in order (%s), as transformers "
            "takes them: check that this is right",
            head.source,
            name,
            pairs,
        )
        return None, None
    extra = [label for label in theirs if label.casefold() not in wanted]
    missing = [label for label in ours if label.casefold() not in folded]
    return None, (
        f"the checkpoint's labels are not {name}'s: it has {', '.join(extra) or 'none'} that the task lacks and lacks "
        f"{', '.join(missing) or 'none'}"
    )


def checkpoint_labels(task_cls: type, head: TaskHead | None) -> list[str]:
    """The label names of a checkpoint head the task could start from (an evaluation without a training file
    takes them as the task's labels); empty when it has none."""
    if head is None or head.labels is None or head.kind != getattr(task_cls, "head_kind", None):
        return []
    return list(head.labels)


def head_record(task: nn.Module) -> dict:
    """What config.yaml records of the task's head beyond its weights (``HEAD_SECTION``): the activation of its own
    dense layer, None without one."""
    return {"activation": getattr(getattr(task, "head", None), "activation_name", None)}


def export_pad_id(vocab: Vocab) -> int:
    """The id that pads an export's inputs for a class that reads the last token other than config.json's
    pad_token_id (GPT's sequence classifiers): the tokenizer's pad token; without one (GPT-2's byte-level BPE, where
    plm-finetune pads with <|endoftext|>, the token that ends every text and that the head reads) an id with no
    special role, so that the last real token is never taken for padding. transformers makes the exported pad token
    a special token, which it finds in raw text before anything else: of those ids, the piece a text is least likely
    to spell, the one with the most characters that stand for unprintable bytes (``BYTE_STAND_INS``: "ĠâĢ", a space
    and the start of a dash, rather than "!"), then the longest, then the lowest id."""
    if vocab.pad_id is not None:
        return vocab.pad_id
    special = set(vocab.special_ids)
    candidates = [i for i in range(vocab.size) if i not in special]
    tokens = vocab.tokens if len(vocab.tokens) == vocab.size else ("",) * vocab.size

    def unlikely(i: int) -> tuple[int, int, int]:
        return sum(ord(c) in BYTE_STAND_INS for c in tokens[i]), len(tokens[i]), -i

    return max(candidates, key=unlikely)


def finetuned_head(step: Path, saved: DictConfig, model: nn.Module, vocab: Vocab | None = None) -> TaskHead | None:
    """The head of the plm-finetune checkpoint ``step`` (``saved``: its config.yaml) over ``model``, as a TaskHead
    (with ``export_pad_id`` of the run's ``vocab``); None without a task or without head weights (a text-to-text
    task: the encoder-decoder is the whole model). CheckpointError for a head that reads a task encoder
    (finetune.mode=features), which no transformers class has, or whose dense layer's activation config.yaml does not
    record."""
    section = saved.get("task")
    path = step / ckpt.OBJECTIVE_FILE
    if section is None or not path.is_file():
        return None
    state = ckpt.read_weights(path)
    if not state:
        return None
    name = f"task={section.name}"
    encoder = sorted(key for key in state if not key.startswith("head."))
    if encoder:
        raise CheckpointError(
            f"{path}: {name}'s head reads a task encoder ({some(encoder, 2)}: the scalar mix and biLSTM of "
            "finetune.mode=features), which no transformers class has"
        )
    kind = getattr(task_class(section.name), "head_kind", None)
    if kind is None:
        raise CheckpointError(f"{path}: {name}'s weights are no head of a kind a transformers task class holds")
    head_state = {key.removeprefix("head."): value for key, value in state.items()}
    activation = (saved.get(HEAD_SECTION) or {}).get("activation")
    if ("dense.weight" in head_state) != (activation is not None):
        has = "has a" if "dense.weight" in head_state else "has no"
        raise CheckpointError(
            f"{step / ckpt.CONFIG_FILE}: {HEAD_SECTION}.activation={activation} does not fit the head of {path}, "
            f"which {has} dense layer of its own (head.dense.*)"
        )
    regression = bool(section.get("regression", False))
    labels = [] if regression else [str(label) for label in section.get("labels") or []]
    problem = ("regression" if regression else "single_label_classification") if kind == "sequence" else None
    return TaskHead(
        name,
        kind,
        head_state,
        path,
        {key: f"head.{key}" for key in head_state},
        activation=activation,
        summary=summary_kind(model) if kind == "sequence" else None,
        labels=labels or None,
        problem_type=problem,
        pad_id=None if vocab is None else export_pad_id(vocab),
    )
