"""Optimizers and learning-rate schedules.

Schedules are multipliers of ``optimizer.lr`` as a function of the optimizer step t = 1, 2, ... (the step about to
be taken), wrapped in ``LambdaLR`` so their position is saved and restored with the checkpoint.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn


def parameter_groups(module: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: matrices that decay, and vectors that never do (BERT, Sec. A.2: biases and LayerNorm weights).

    Chosen by shape, not by module type, so that any normalisation (LayerNorm, RMSNorm, ...) and any bias vector
    is exempt without a list of classes; parameters named ``*bias`` (Transformer-XL's u and v, one vector per
    head) are biases too."""
    decay, rest, seen = [], [], set()
    for name, param in module.named_parameters():
        if not param.requires_grad or id(param) in seen:
            continue
        seen.add(id(param))
        if param.dim() < 2 or name.endswith("bias"):
            rest.append(param)
        else:
            decay.append(param)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def build_optimizer(module: nn.Module, cfg) -> torch.optim.Optimizer:
    groups = parameter_groups(module, cfg.weight_decay)
    name = cfg.name.value if hasattr(cfg.name, "value") else cfg.name
    if name == "adamw":
        return torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps)
    if name == "adam":
        # Adam's weight decay is an L2 term added to the gradient, as in the original Transformer recipe.
        return torch.optim.Adam(groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps)
    if name == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum)
    raise ValueError(f"unknown optimizer {name!r}")


@dataclass
class ScheduleFactor:
    """lr multiplier at optimizer step t (1-based). A plain object, so LambdaLR can save its fields."""

    kind: str
    warmup_steps: int
    total_steps: int
    min_lr_ratio: float = 0.0
    d_model: int = 1

    def __call__(self, index: int) -> float:
        t = index + 1  # LambdaLR passes 0 for the first step
        warmup = self.warmup_steps
        if self.kind == "noam":
            # "Attention Is All You Need", Sec. 5.3: d_model^-0.5 * min(t^-0.5, t * warmup^-1.5).
            return self.d_model**-0.5 * min(t**-0.5, t * warmup**-1.5)
        if warmup > 0 and t <= warmup:
            return t / warmup
        if self.kind == "constant":
            return 1.0
        if self.kind == "inverse_sqrt":
            return math.sqrt(max(warmup, 1) / t)
        span = max(self.total_steps - warmup, 1)
        progress = min(max(t - warmup, 0) / span, 1.0)
        if self.kind == "linear":
            decay = 1.0 - progress
        elif self.kind == "cosine":
            decay = 0.5 * (1.0 + math.cos(math.pi * progress))
        else:
            raise ValueError(f"unknown schedule {self.kind!r}")
        return self.min_lr_ratio + (1.0 - self.min_lr_ratio) * decay


def schedule_factor(cfg, max_steps: int) -> ScheduleFactor:
    total = cfg.total_steps or max_steps
    warmup = cfg.warmup_steps or int(round(cfg.warmup_ratio * total))
    kind = cfg.schedule.value if hasattr(cfg.schedule, "value") else cfg.schedule
    return ScheduleFactor(kind, warmup, total, cfg.min_lr_ratio, int(cfg.d_model))


def build_scheduler(optimizer: torch.optim.Optimizer, cfg, max_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, schedule_factor(cfg, max_steps))
