"""Optimizers and learning-rate schedules.

Schedules are multipliers of ``optimizer.lr`` as a function of the optimizer step t = 1, 2, ... (the step about to
be taken), wrapped in ``LambdaLR`` so their position is saved and restored with the checkpoint.
"""

from __future__ import annotations

import inspect
import logging
import math
from dataclasses import dataclass

import torch
from torch import nn

from plm_toolkit.core.errors import ConfigError
from plm_toolkit.training.scaled_adam import AdamWScale, Lamb

log = logging.getLogger("plm_toolkit")


def parameter_groups(module: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: matrices that decay, and vectors that never do (BERT, Sec. A.2: biases and LayerNorm weights).

    Chosen by shape, not by module type, so that any normalisation (LayerNorm, RMSNorm, ...) and any bias vector
    is exempt without a list of classes; parameters named ``*bias`` (Transformer-XL's u and v, one vector per
    head) are biases too. The vectors are also exempt from LAMB's layer adaptation (``adapt``), as ALBERT's
    lamb_optimizer.py exempts LayerNorm and bias."""
    decay, rest, seen = [], [], set()
    for name, param in module.named_parameters():
        if not param.requires_grad or id(param) in seen:
            continue
        seen.add(id(param))
        if param.dim() < 2 or name.endswith("bias"):
            rest.append(param)
        else:
            decay.append(param)
    groups = [
        {"params": decay, "weight_decay": weight_decay, "adapt": True},
        {"params": rest, "weight_decay": 0.0, "adapt": False},
    ]
    return [g for g in groups if g["params"]]


def kernel_options(optimizer_class: type, params: list[torch.Tensor], implementation: str) -> dict:
    """``fused``/``foreach`` arguments for ``implementation``: auto takes the fused kernel where torch has one for
    this optimizer and device (Adam, AdamW and SGD on CPU and CUDA since torch 2.4; Adagrad on CPU only) and foreach
    elsewhere, but for Adafactor, whose for-loop auto keeps. A fused step over BERT-sized parameter lists is several
    times faster than the per-parameter loop torch picks on CPU."""
    if implementation == "for_loop":
        return {"foreach": False}
    if implementation == "foreach":
        return {"foreach": True}
    if implementation == "auto" and optimizer_class is torch.optim.Adafactor:
        # Its for-loop is torch's default on purpose: foreach holds a copy of every gradient more.
        return {}
    from torch.optim.optimizer import _get_fused_kernels_supported_devices

    device = params[0].device.type if params else "cpu"
    fused_devices = ("cpu",) if optimizer_class is torch.optim.Adagrad else _get_fused_kernels_supported_devices()
    fusable = (
        "fused" in inspect.signature(optimizer_class).parameters
        and device in fused_devices
        and all(p.is_floating_point() and p.device.type == device for p in params)
    )
    if fusable:
        return {"fused": True}
    if implementation == "fused":
        raise ConfigError(
            f"hardware.optimizer_implementation=fused: torch has no fused {optimizer_class.__name__} for "
            f"{device} parameters; use auto or foreach"
        )
    return {"foreach": True}


def build_optimizer(module: nn.Module, cfg, implementation: str = "auto") -> torch.optim.Optimizer:
    groups = parameter_groups(module, cfg.weight_decay)
    name = cfg.name.value if hasattr(cfg.name, "value") else cfg.name
    implementation = getattr(implementation, "value", implementation)
    betas = tuple(cfg.betas)
    # Ours (training/scaled_adam.py), with one implementation each; parameter_scale: a key only the schema need have.
    if name == "lamb" or (name == "adamw" and getattr(cfg, "parameter_scale", False)):
        _single_implementation(name, implementation)
        if name == "lamb":
            return Lamb(groups, lr=cfg.lr, betas=betas, eps=cfg.eps, bias_correction=cfg.bias_correction)
        return AdamWScale(groups, lr=cfg.lr, betas=betas, eps=cfg.eps, scale_epsilon=cfg.scale_epsilon)
    optimizer_class, settings = torch_optimizer(name, cfg, betas)
    kernels = kernel_options(optimizer_class, [p for g in groups for p in g["params"]], implementation)
    return optimizer_class(groups, lr=cfg.lr, **settings, **kernels)


def torch_optimizer(name: str, cfg, betas: tuple[float, ...]) -> tuple[type, dict]:
    """torch's optimizer class for ``optimizer.name`` and its settings besides the groups, lr and kernel."""
    if name == "adamw":
        return torch.optim.AdamW, {"betas": betas, "eps": cfg.eps}
    if name == "adam":
        # Adam's weight decay is an L2 term added to the gradient, as in the original Transformer recipe.
        return torch.optim.Adam, {"betas": betas, "eps": cfg.eps}
    if name == "sgd":
        return torch.optim.SGD, {"momentum": cfg.momentum}
    if name == "adafactor":
        # torch's Adafactor is T5's: relative step min(lr_t, 1/sqrt(t)) times max(eps2, RMS(w)), beta2_t = 1 -
        # t^-0.8, update clipping at d, factored second moments for matrices, no momentum.
        return torch.optim.Adafactor, {
            "beta2_decay": -cfg.decay_rate,
            "eps": (cfg.eps, cfg.scale_epsilon),
            "d": cfg.clip_threshold,
        }
    if name == "adagrad":
        return torch.optim.Adagrad, {"eps": cfg.eps, "initial_accumulator_value": cfg.initial_accumulator}
    raise ValueError(f"unknown optimizer {name!r}")


def _single_implementation(name: str, implementation: str) -> None:
    """LAMB and AdamW with parameter scaling have one implementation (ours); refuse a fused kernel asked for."""
    if implementation == "fused":
        raise ConfigError(
            f"hardware.optimizer_implementation=fused: optimizer.name={name} has no fused kernel; use auto"
        )


@dataclass
class ScheduleFactor:
    """lr multiplier at optimizer step t (1-based). A plain object, so LambdaLR can save its fields."""

    kind: str
    warmup_steps: int
    total_steps: int
    min_lr_ratio: float = 0.0
    d_model: int = 1
    warmup_start: float = 0.0
    # With a time budget (trainer.time_budget) the decay follows the share of the budget used, which the loop
    # sets before each scheduler step, instead of the step count; warmup_fraction is warm-up's share of it.
    time_based: bool = False
    progress: float = 0.0
    warmup_fraction: float = 0.0

    def __call__(self, index: int) -> float:
        t = index + 1  # LambdaLR passes 0 for the first step
        warmup = self.warmup_steps
        step_based = ("noam", "inverse_sqrt", "constant_then_inverse_sqrt")
        if self.time_based and self.kind not in step_based and not (warmup > 0 and t <= warmup):
            return self._over_budget()
        if self.kind == "noam":
            # "Attention Is All You Need", Sec. 5.3: d_model^-0.5 * min(t^-0.5, t * warmup^-1.5).
            return self.d_model**-0.5 * min(t**-0.5, t * warmup**-1.5)
        if self.kind == "constant_then_inverse_sqrt":
            # T5 (Raffel et al. 2020, Sec. 3.1.2): 1 / sqrt(max(t, k)) with k = 10^4, as a multiple of lr = k^-0.5.
            return math.sqrt(warmup / max(t, warmup))
        if warmup > 0 and t <= warmup:
            return self.warmup_start + (1.0 - self.warmup_start) * t / warmup
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

    def _over_budget(self) -> float:
        """The schedule at ``progress`` (share of the time budget used) instead of at a step."""
        p = min(max(self.progress, 0.0), 1.0)
        if self.warmup_fraction > 0 and p < self.warmup_fraction:
            return max(p / self.warmup_fraction, 1e-3)
        if self.kind == "constant":
            return 1.0
        progress = (p - self.warmup_fraction) / max(1.0 - self.warmup_fraction, 1e-9)
        decay = 1.0 - progress if self.kind == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
        return self.min_lr_ratio + (1.0 - self.min_lr_ratio) * decay


def schedule_factor(cfg, max_steps: int, time_based: bool = False) -> ScheduleFactor:
    total = cfg.total_steps or max_steps
    warmup = cfg.warmup_steps or (0 if time_based else int(round(cfg.warmup_ratio * total)))
    kind = cfg.schedule.value if hasattr(cfg.schedule, "value") else cfg.schedule
    if warmup >= max_steps > 0 and kind != "constant_then_inverse_sqrt" and not time_based:
        log.warning(long_warmup(cfg, warmup, max_steps))
    factor = ScheduleFactor(kind, warmup, total, cfg.min_lr_ratio, int(cfg.d_model), cfg.warmup_start)
    if time_based:
        factor.time_based, factor.warmup_fraction = True, float(cfg.warmup_ratio)
    return factor


def long_warmup(cfg, warmup: int, max_steps: int) -> str:
    """The warning for a warm-up that lasts the whole run: legal (a scaled-down run of a paper recipe keeps its
    warm-up on purpose), but the learning rate never reaches its peak, which is rarely what was meant."""
    key = f"optimizer.warmup_steps={cfg.warmup_steps}" if cfg.warmup_steps else (
        f"optimizer.warmup_ratio={cfg.warmup_ratio} of optimizer.total_steps={cfg.total_steps} ({warmup} steps)"
    )  # fmt: skip
    start = float(cfg.warmup_start)
    reached = start + (1.0 - start) * max_steps / warmup
    return (
        f"{key} lasts the whole run of {max_steps} optimizer step(s): the learning rate climbs to {reached:.0%} of "
        "its peak and never decays; shorten the warm-up or train for longer"
    )


def build_scheduler(
    optimizer: torch.optim.Optimizer, cfg, max_steps: int, time_based: bool = False
) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, schedule_factor(cfg, max_steps, time_based))


def apply_config(optimizer: torch.optim.Optimizer, scheduler, module: nn.Module, cfg, max_steps: int) -> int:
    """After a resume, the run's config decides the optimizer from here on, not the checkpoint's: the groups' weight
    decay, betas, eps and momentum, the peak rate and the schedule (a run extended with a larger trainer.max_steps
    decays to its new end, as if it had been started with that length, instead of training on at the old end's
    floor). With an unchanged config every value is the one restored. Returns the schedule's total steps before."""
    factor = scheduler.lr_lambdas[0]  # LambdaLR holds one object for every group
    before = factor.total_steps
    progress = factor.progress
    factor.__dict__.update(vars(schedule_factor(cfg, max_steps, factor.time_based)))
    factor.progress = progress  # the share of the time budget at the last step
    for group, planned in zip(optimizer.param_groups, parameter_groups(module, cfg.weight_decay), strict=True):
        group["weight_decay"] = planned["weight_decay"]
        for key, value in (("betas", tuple(cfg.betas)), ("eps", cfg.eps), ("momentum", cfg.momentum)):
            if key in group:
                group[key] = value
        group["initial_lr"] = cfg.lr
    scheduler.base_lrs = [cfg.lr for _ in optimizer.param_groups]
    for group in optimizer.param_groups:
        group["lr"] = cfg.lr * factor(scheduler.last_epoch)  # what LambdaLR computes
    scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]
    return before
