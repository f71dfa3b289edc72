"""Position information: sinusoids (absolute for the original Transformer, relative distances for Transformer-XL
and XLNet) and the position ids of left-padded rows. Learned absolute tables are ``nn.Embedding`` rows inside the
families' embeddings (``nn/embeddings.py``)."""

from __future__ import annotations

import torch


def sinusoid_embedding(positions: torch.Tensor, size: int) -> torch.Tensor:
    """(R,) positions or relative distances -> (R, size) [sin | cos] features (Vaswani et al. 2017, section 3.5:
    frequencies 1 / 10000^(2i / size); the sines first, then the cosines, as tensor2tensor and fairseq lay them)."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0.0, size, 2.0, device=positions.device) / size))  # (size/2,)
    angles = torch.outer(positions.float(), inv_freq)  # (R, size/2)
    return torch.cat([angles.sin(), angles.cos()], dim=-1)  # (R, size)


def position_ids(attention_mask: torch.Tensor, past_length: int = 0) -> torch.Tensor:
    """(B, K) 1 = token / 0 = padding over every key so far -> (B, K - past_length) position ids of the new ones.

    A left-padded row (batched generation) numbers its first real token 0, as it would alone; padding gets 0.
    """
    positions = attention_mask.long().cumsum(dim=1) - 1  # (B, K)
    return positions[:, past_length:].clamp(min=0)
