"""A fine-tuned sequence classifier (a plm-finetune checkpoint of a GLUE task or task=classification) predicting rows
it was not evaluated on: plm-glue's further dev files (MNLI's mismatched section) and unlabeled test files.

The task is rebuilt as plm-finetune built it, from the checkpoint's config.yaml (its task section, with the labels
read from the training data, and its finetune.mode), and its head (with its dense layer, bias and task encoder)
loaded from objective.safetensors as plm-finetune loads a checkpoint's head (``tasks/checkpoint_head.py``), here
refusing a head that does not fit; the backbone comes from model.safetensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from omegaconf import OmegaConf
from tokenizers import Tokenizer

from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core.errors import CheckpointError
from plm_toolkit.data.tokenization.tokenizer import vocab_from_tokenizer
from plm_toolkit.interop.checkpoint_reader import read_config_yaml
from plm_toolkit.interop.pretrained import load_backbone
from plm_toolkit.tasks.base import TaskData, character_width
from plm_toolkit.tasks.checkpoint_head import run_finetune_mode, start_from_checkpoint_head
from plm_toolkit.tasks.classification import ClassificationConfig, Row, SequenceClassification, encode_rows
from plm_toolkit.tasks.dispatch import task_for_backbone

if TYPE_CHECKING:  # the commands' device and precision; the task itself never imports the training code
    from plm_toolkit.training.precision import Runtime


@dataclass
class Classifier:
    task: SequenceClassification
    model: torch.nn.Module
    tokenizer: Tokenizer
    # Characters per token for a backbone that reads characters (ELMo), else 0.
    characters: int


def load_classifier(step: Path) -> Classifier:
    """The fine-tuned classifier of the plm-finetune checkpoint ``step``, in evaluation mode on the CPU."""
    loaded = load_backbone(step, with_task_head=True)
    saved = read_config_yaml(step / ckpt.CONFIG_FILE)
    section = saved.get("task")
    if section is None or "labels" not in section:
        raise CheckpointError(f"{step / ckpt.CONFIG_FILE}: no sequence-classification task section")
    config = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ClassificationConfig), section))
    cls = task_for_backbone(SequenceClassification, loaded.model, config.name)
    if cls is not SequenceClassification:
        raise CheckpointError(
            f"{step}: task={config.name} on an encoder-decoder is text-to-text; only a classifier head is predicted "
            "here (plm-glue: glue.predict_test=false, and leave out mnli, whose mismatched dev file needs it)"
        )
    vocab = vocab_from_tokenizer(loaded.tokenizer, source=step)
    data = TaskData([], None, labels=list(config.labels))
    task = SequenceClassification(config, loaded.model, vocab, data, finetune=run_finetune_mode(saved))
    # The checkpoint's own task: its head (and task encoder) must load, or the predictions would be a fresh head's.
    start_from_checkpoint_head(task, loaded.model, loaded.task_head, required=True)
    task.eval()
    loaded.model.eval()
    return Classifier(task, loaded.model, loaded.tokenizer, character_width(loaded.model))


@torch.no_grad()
def predict(classifier: Classifier, rows: list[Row], max_seq_len: int, batch_size: int, runtime: Runtime) -> list:
    """The predicted label name (or number, for regression) of each row, in the rows' order. Rows are batched by
    length, so that padding costs little."""
    regression = classifier.task.config.regression
    targets = [0.0 if regression else 0] * len(rows)
    features = encode_rows(rows, targets, classifier.tokenizer, max_seq_len, True, classifier.characters)
    order = sorted(range(len(features)), key=lambda i: len(features[i]["input_ids"]))
    collate = classifier.task.collator()
    model, task = classifier.model.to(runtime.device), classifier.task.to(runtime.device)
    out: list = [None] * len(rows)
    for start in range(0, len(order), batch_size):
        batch = collate([features[i] for i in order[start : start + batch_size]])
        batch = {key: value.to(runtime.device) for key, value in batch.items()}
        with runtime.autocast():
            logits = task.logits(model, batch)  # (B, C)
        values = logits.squeeze(-1).tolist() if regression else logits.argmax(dim=-1).tolist()
        for index, value in zip(batch["index"].tolist(), values, strict=True):
            out[index] = value if regression else task.labels[value]
    return out
