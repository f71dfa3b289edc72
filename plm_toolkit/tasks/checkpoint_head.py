"""Start a task's head from a fine-tuned checkpoint's, as transformers' ``from_pretrained`` does, or say why not.

A fine-tuned checkpoint brings its task head as a ``TaskHead``: a Hugging Face folder's (``interop/hf_heads.py``) or
a plm-finetune run's (``interop/finetuned_head.py``); ``load_backbone(..., with_task_head=True)`` reads either, and
``start_from_checkpoint_head`` decides on both. A Hugging Face folder's head starts the task's head when both compute
the same function: the same kind (a sequence classifier for the GLUE tasks and task=classification, a token
classifier for NER, a span scorer for SQuAD), the same summary of the sequence (the backbone's pooled vector, or the
first or last token), the same number of outputs, and labels that agree. Labels that config.json's id2label names
are matched to the task's by name (case aside), and the head's rows reordered to the task's order; names that share
nothing with the task's (NEGATIVE/POSITIVE against SST-2's 0/1) are taken in order, as transformers takes them, with
a warning that spells out the pairing; names that differ in part refuse the head. A plm-finetune run's head, with
the rest of its task module (finetune.mode=features' task encoder, KBQA's mention tagger), starts a task of the same
name in the same finetune.mode with the same head settings and the same labels, by exact name. Otherwise the task
keeps its fresh head and one warning line names the file, the unused keys and why.

The other way, for plm-export: ``finetuned_head`` gives a plm-finetune checkpoint's head (its weights, the task's
kind and labels, the summary its backbone gives, and the activation of the head's own dense layer that plm-finetune
records in config.yaml, ``head_record``) to ``interop.hf.export_hf``, which writes it as the transformers task class
that computes the same.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from plm_toolkit.core.command_schema import FinetuneModeConfig
from plm_toolkit.core.errors import CheckpointError
from plm_toolkit.core.weights import check_values
from plm_toolkit.data.tokenization.tokenizer import BYTE_STAND_INS
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.interop.finetuned_head import read_finetuned_head
from plm_toolkit.interop.hf import some
from plm_toolkit.interop.hf_heads import KINDS, SUMMARIES, TaskHead
from plm_toolkit.tasks.base import summary_kind

log = logging.getLogger("plm_toolkit")

POOLER_KEYS = ("pooler.dense.weight", "pooler.dense.bias")


def start_from_checkpoint_head(
    task: nn.Module,
    model: nn.Module,
    head: TaskHead | None,
    initialized_keys: list[str] = (),
    required: bool = False,
) -> bool:
    """Load ``head`` into the task's head (and the rest of a plm-finetune checkpoint's task module, a task encoder or
    KBQA's mention tagger, beside it) when it computes what the task's head computes; else warn, in one line, and
    keep the fresh head, or with ``required`` (a command that predicts with the checkpoint's own task) raise
    CheckpointError saying why. Returns whether the head was loaded."""
    if head is None:
        return False
    name = f"task={task.config.name}"
    trained = head.trained
    if trained is not None and not head.state and not trained.others:
        log.info("%s: %s, fine-tuned for task=%s, is an encoder-decoder: the whole model, no head to load", name,
                 head.source.parent, trained.name)  # fmt: skip
        return False
    rows, problem = match_head(task, model, head)
    if problem is not None:
        if required:
            raise CheckpointError(f"{head.source}: {name} cannot take this head ({problem})")
        fresh = "a fresh head"
        if getattr(task, "head_kind", None) == "sequence" and set(POOLER_KEYS) & set(initialized_keys):
            fresh += " and a fresh pooler (the checkpoint has none)"
        log.warning(head.unused(problem, f"{name} starts from {fresh}"))
        return False
    module = getattr(task, task.head_name)
    state = dict(head.state)
    if rows is not None:
        index = torch.tensor(rows)
        state = {key: value[index] if key.startswith("linear.") else value for key, value in state.items()}
    if head.activation is not None and getattr(module, "dense", None) is None:
        module.add_dense(head.activation)
    if "linear.bias" not in state:  # transformers' GPT score: none, or a zero one where task.head_bias=true
        if getattr(task.config, "head_bias", None) is None:
            module.drop_bias()
        elif module.linear.bias is not None:
            state["linear.bias"] = torch.zeros_like(module.linear.bias)
    prefix = f"{task.head_name}."
    names = {prefix + key: head.source_keys.get(key, prefix + key) for key in state}
    whole = {prefix + key: value for key, value in state.items()} | (trained.others if trained is not None else {})
    load_task_state(task, whole, head.source, names, name)
    what = "head" if trained is None or not trained.others else "head and the rest of its task module"
    log.info("%s starts from the %s %s of %s", name, head.architecture, what, head.source)
    return True


def load_task_state(task: nn.Module, state: dict[str, torch.Tensor], source: Path, names: dict, name: str) -> None:
    """Load ``state`` into the whole task module (``names``: its keys -> the file's, for messages); CheckpointError
    naming the file for keys the task lacks or does not know, a tensor of another shape, or values no weight may hold
    (NaN, infinity, integers)."""
    own = task.state_dict()
    missing = sorted(names.get(key, key) for key in set(own) - set(state))
    unexpected = sorted(names.get(key, key) for key in set(state) - set(own))
    wrong = [
        f"{names.get(key, key)} {tuple(value.shape)}, expected {tuple(own[key].shape)}"
        for key, value in sorted(state.items())
        if key in own and value.shape != own[key].shape
    ]
    problems = []
    if missing:
        problems.append(f"missing key(s) {some(missing)}")
    if unexpected:
        problems.append(f"unexpected key(s) {some(unexpected)}")
    if wrong:
        problems.append(f"shape {some(wrong, 3)}")
    if problems:
        raise CheckpointError(f"{source}: does not hold {name}'s task module: {'; '.join(problems)}")
    check_values(source, state, task, names)
    task.load_state_dict(state)


def match_head(task: nn.Module, model: nn.Module, head: TaskHead) -> tuple[list[int] | None, str | None]:
    """(the checkpoint's row for each of the task's outputs, or None to keep them in order; why the head cannot
    serve the task, or None)."""
    if head.trained is not None:
        return match_trained_head(task, head)
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
    problem = settings_problem(task, head)
    if problem is not None:
        return None, problem
    if wanted == "sequence":
        ours = summary_kind(model)
        if head.summary != ours:
            return None, f"it reads the {SUMMARIES[head.summary]}, {name} on this backbone the {SUMMARIES[ours]}"
        if head.problem_type == "multi_label_classification":
            return None, f"a multi-label classifier (a sigmoid per label); {name} picks one label"
    return outputs_match(task, head, name)


def match_trained_head(task: nn.Module, head: TaskHead) -> tuple[list[int] | None, str | None]:
    """``match_head`` for a plm-finetune checkpoint's head: the same task (by name), the same finetune.mode and task
    encoder, the same head settings and outputs, and the same labels (by name; their rows follow the task's order)."""
    name = f"task={task.config.name}"
    trained = head.trained
    if trained.name != task.config.name:
        return None, f"it was fine-tuned for task={trained.name}, not {name}"
    ours = getattr(task, "features", None)
    if trained.encoder is None and ours is not None:
        return None, "it reads the backbone's states (finetune.mode=full); this run's finetune.mode=features"
    if trained.encoder is not None and ours is None:
        return None, "it reads a task encoder (finetune.mode=features); this run's finetune.mode=full"
    if ours is not None and trained.encoder != (ours.lstm.hidden_size, ours.lstm.num_layers):
        return None, (
            f"its task encoder has finetune.encoder_hidden_size={trained.encoder[0]} and "
            f"finetune.encoder_layers={trained.encoder[1]}, this run's {ours.lstm.hidden_size} and "
            f"{ours.lstm.num_layers}"
        )
    if getattr(task, "head_kind", None) == "span":
        return None, None
    problem = settings_problem(task, head)
    if problem is not None:
        return None, problem
    return outputs_match(task, head, name)


def settings_problem(task: nn.Module, head: TaskHead) -> str | None:
    """Why the head's own dense layer or bias is not what the task's config asks for, or None."""
    activation = getattr(task.config, "head_activation", None)
    if activation is not None and head.activation != activation:
        has = "no dense layer" if head.activation is None else f"a dense layer with {head.activation}"
        return f"it has {has} of its own; task.head_activation={activation} asks for one with {activation}"
    if getattr(task.config, "head_bias", None) is False and "linear.bias" in head.state:
        return "its classifier has a bias; task.head_bias=false asks for one without"
    return None


def outputs_match(task: nn.Module, head: TaskHead, name: str) -> tuple[list[int] | None, str | None]:
    """``match_head``'s verdict on the outputs: one number for a regression, else one row per label of the task."""
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
    """The checkpoint's row for each task label, matched by name (case aside for a Hugging Face folder's, whose
    names may be spelled otherwise; exactly for a plm-finetune run's); None to take them in order."""
    theirs = head.labels
    if theirs is None or theirs == ours:
        return None, None
    exact = head.trained is not None

    def fold(label: str) -> str:
        return label if exact else label.casefold()

    folded = [fold(label) for label in theirs]
    wanted = [fold(label) for label in ours]
    if len(set(folded)) == len(folded) and set(folded) == set(wanted):
        rows = [folded.index(label) for label in wanted]
        log.info("%s: its labels are %s's in another order; the head's rows follow the task's", head.source, name)
        return rows, None
    if not exact and not set(folded) & set(wanted):
        pairs = ", ".join(f"{a}={b}" for a, b in zip(theirs, ours, strict=True))
        log.warning(
            "%s: the checkpoint's labels share no name with %s's; they are taken in order (%s), as transformers "
            "takes them: check that this is right",
            head.source,
            name,
            pairs,
        )
        return None, None
    extra = [label for label in theirs if fold(label) not in wanted]
    missing = [label for label in ours if fold(label) not in folded]
    return None, (
        f"the checkpoint's labels are not {name}'s: it has {', '.join(extra) or 'none'} that the task lacks and lacks "
        f"{', '.join(missing) or 'none'}"
    )


def checkpoint_labels(task_cls: type, name: str, head: TaskHead | None) -> list[str]:
    """The label names of a checkpoint head that task ``name`` (of class ``task_cls``) could start from, in its
    order (an evaluation without a training file takes them as the task's labels); empty when it has none. A
    plm-finetune run's are its task's labels when it was fine-tuned for the same task."""
    if head is None or head.labels is None:
        return []
    if head.trained is not None:
        return list(head.labels) if head.trained.name == name else []
    return list(head.labels) if head.kind == getattr(task_cls, "head_kind", None) else []


def run_finetune_mode(saved: DictConfig) -> FinetuneModeConfig:
    """The finetune.mode settings a plm-finetune run's config.yaml (``saved``) records: its task as the run built it."""
    mode = OmegaConf.structured(FinetuneModeConfig)
    if saved.get("finetune") is not None:
        mode = OmegaConf.merge(mode, saved.finetune)
    return OmegaConf.to_object(mode)


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
    """The head of the plm-finetune checkpoint ``step`` (``saved``: its config.yaml) over ``model``, as plm-export
    writes it (``interop/finetuned_head.py``'s reading, with the summary the backbone gives and ``export_pad_id`` of
    the run's ``vocab``); None without a task or without head weights (a text-to-text task: the encoder-decoder is the
    whole model). CheckpointError for a head that reads a task encoder (finetune.mode=features) or a task module
    beside it (KBQA's), which no transformers class has."""
    head = read_finetuned_head(step, saved, model)
    if head is None or (not head.state and not head.trained.others):
        return None
    others = sorted(head.trained.others)
    if head.trained.encoder is not None:
        raise CheckpointError(
            f"{head.source}: {head.architecture}'s head reads a task encoder ({some(others, 2)}: the scalar mix and "
            "biLSTM of finetune.mode=features), which no transformers class has"
        )
    if head.kind is None or others:
        raise CheckpointError(
            f"{head.source}: {head.architecture}'s weights are no head of a kind a transformers task class holds"
        )
    summary = summary_kind(model) if head.kind == "sequence" else None
    return dataclasses.replace(head, summary=summary, pad_id=None if vocab is None else export_pad_id(vocab))
