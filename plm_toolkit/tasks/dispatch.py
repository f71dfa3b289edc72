"""Which task class serves a backbone: the generic choice every command that fine-tunes makes (plm-finetune, plm-glue's
predictions), in one place rather than in any one task's module."""

from __future__ import annotations

from torch import nn

from plm_toolkit.core.errors import ConfigError
from plm_toolkit.models.base import ENCODER_DECODER
from plm_toolkit.tasks.classification import SequenceClassification
from plm_toolkit.tasks.seq2seq import Seq2SeqTask, TextToTextClassification


def task_for_backbone(cls: type, model: nn.Module, name: str) -> type:
    """The task class that serves ``model``: a classification task becomes its text-to-text form on an
    encoder-decoder; a task the backbone cannot serve stops with a message naming both."""
    capabilities = type(model).capabilities
    family = getattr(model.config, "name", type(model).__name__)
    if ENCODER_DECODER in capabilities:
        if issubclass(cls, SequenceClassification):
            return TextToTextClassification
        if not issubclass(cls, Seq2SeqTask):
            raise ConfigError(
                f"task={name} puts a head on an encoder's token states; model.checkpoint holds an "
                f"encoder-decoder ({family}): fine-tune it on translation, seq2seq or a classification "
                "task (text-to-text)"
            )
    elif issubclass(cls, Seq2SeqTask):
        raise ConfigError(
            f"task={name} generates text and needs an encoder-decoder backbone (transformer, t5); "
            f"model.checkpoint holds {family}"
        )
    return cls
