"""Feature-based fine-tuning (``finetune.mode=features``): the backbone stays frozen and a task learns only what sits
on top of its layers, as ELMo is used (Peters et al. 2018, section 3.3) and as the BERT paper's feature-based NER
(Devlin et al. 2019, section 5.3) uses BERT.

Every layer of the frozen backbone (``Representations.all_hidden``: the embedding output, then each layer's) is
mixed by a learned scalar mix (softmax-normalised weights and a scale gamma, ``nn/scalar_mix.py``), dropped out, and
fed to a small task encoder, a bidirectional LSTM; the task's head reads the encoder's states per token (NER, SQuAD)
or its summary (sentence tasks: the forward LSTM after the last token and the backward one after the first). The
backbone runs in evaluation mode without gradients, so its dropout is off and its weights never change.
"""

from __future__ import annotations

import torch
from torch import nn

from plm_toolkit.core.command_schema import FinetuneModeConfig
from plm_toolkit.models.base import Representations
from plm_toolkit.nn.scalar_mix import ScalarMix


def frozen_layers(model: nn.Module, batch: dict[str, torch.Tensor], encode) -> list[torch.Tensor]:
    """Every layer of the backbone for ``batch``, computed in evaluation mode without gradients."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            reps = encode(model, batch, output_all_hidden=True)
    finally:
        model.train(was_training)
    if not reps.all_hidden:
        raise ValueError(f"{type(model).__name__} does not return its layers (output_all_hidden)")
    return reps.all_hidden


class FeatureEncoder(nn.Module):
    """Scalar mix of a frozen backbone's layers -> dropout -> biLSTM; returns the biLSTM's states as
    ``Representations`` so that the task's head reads them like a backbone's."""

    def __init__(self, num_layers: int, input_size: int, config: FinetuneModeConfig):
        super().__init__()
        self.mix = ScalarMix(num_layers)
        self.dropout = nn.Dropout(config.dropout)
        self.lstm = nn.LSTM(
            input_size,
            config.encoder_hidden_size,
            num_layers=config.encoder_layers,
            batch_first=True,
            bidirectional=True,
            dropout=config.dropout if config.encoder_layers > 1 else 0.0,
        )
        self.output_size = 2 * config.encoder_hidden_size

    def forward(self, layers: list[torch.Tensor], attention_mask: torch.Tensor) -> Representations:
        mixed = self.dropout(self.mix([layer.float() for layer in layers]))  # (B, T, H)
        lengths = attention_mask.sum(dim=1).clamp(min=1).cpu()  # (B,)
        packed = nn.utils.rnn.pack_padded_sequence(mixed, lengths, batch_first=True, enforce_sorted=False)
        states, _ = self.lstm(packed)
        hidden, _ = nn.utils.rnn.pad_packed_sequence(states, batch_first=True, total_length=mixed.shape[1])
        size = self.output_size // 2
        rows = torch.arange(hidden.shape[0], device=hidden.device)
        last = (lengths - 1).to(hidden.device)
        pooled = torch.cat([hidden[rows, last, :size], hidden[:, 0, size:]], dim=-1)  # (B, 2E)
        return Representations(hidden=hidden, pooled=pooled)  # (B, T, 2E)
