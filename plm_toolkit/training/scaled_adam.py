"""Adam variants whose step is scaled tensor by tensor: LAMB and AdamW with Adafactor's parameter scaling.

Ours because no well-kept package computes what the papers' code does. torch has neither; timm's Lamb needs
torchvision; pytorch-optimizer's Lamb decays the weights outside the trust ratio and clamps ||w|| at 10;
torch-optimizer (unmaintained since 2021) adapts every tensor, LayerNorm and biases included. Neither offers
nanoT5's AdamW with RMS scaling.
"""

from __future__ import annotations

import torch


class _AdamMoments(torch.optim.Optimizer):
    """Adam's first and second moments per parameter; subclasses turn them into a step (``_apply``)."""

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError(f"{type(self).__name__} does not support sparse gradients")
                state = self.state[p]
                if not state:
                    state["step"] = torch.tensor(0.0)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["step"] += 1
                state["exp_avg"].lerp_(p.grad, 1 - beta1)
                state["exp_avg_sq"].mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                self._apply(p, state, group, float(state["step"]))
        return loss

    def _apply(self, p: torch.Tensor, state: dict, group: dict, t: float) -> None:
        raise NotImplementedError


class Lamb(_AdamMoments):
    """LAMB (You et al. 2020, Algorithm 2), with the arithmetic of google-research/albert's lamb_optimizer.py and
    TensorFlow Addons' LAMB:

        u = m_hat / (sqrt(v_hat) + eps) + weight_decay * w
        w <- w - lr * ratio * u,   ratio = ||w|| / ||u|| where both norms are positive, else 1

    with m_hat, v_hat the moments divided by 1 - beta^t when ``bias_correction`` (the paper, TF Addons) and as they
    are without (ALBERT's code). A group with ``adapt: False`` (biases and LayerNorm weights, as ALBERT excludes
    them from weight decay and from layer adaptation) steps with ratio 1."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0, bias_correction=True):
        if not lr >= 0.0 or not eps > 0.0 or not weight_decay >= 0.0 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"Lamb: invalid lr={lr}, betas={betas}, eps={eps} or weight_decay={weight_decay}")
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, adapt=True)
        defaults["bias_correction"] = bias_correction
        super().__init__(params, defaults)

    def _apply(self, p, state, group, t):
        beta1, beta2 = group["betas"]
        m, v = state["exp_avg"], state["exp_avg_sq"]
        if group["bias_correction"]:
            m, v = m / (1 - beta1**t), v / (1 - beta2**t)
        update = m / (v.sqrt() + group["eps"])
        if group["weight_decay"]:
            update.add_(p, alpha=group["weight_decay"])
        if group["adapt"]:
            w_norm, u_norm = torch.linalg.vector_norm(p), torch.linalg.vector_norm(update)
            ratio = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
            update.mul_(ratio)
        p.add_(update, alpha=-group["lr"])


class AdamWScale(_AdamMoments):
    """AdamW whose step is multiplied by each tensor's max(scale_epsilon, RMS(w)) before the update, Adafactor's
    parameter scaling, as nanoT5 pretrains T5 v1.1 (its ``AdamWScale``): bias-corrected Adam, then decoupled decay
    w <- w - lr * weight_decay * w after the step."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0, scale_epsilon=1e-3):
        if not lr >= 0.0 or not eps > 0.0 or not scale_epsilon >= 0.0 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"AdamWScale: invalid lr={lr}, betas={betas}, eps={eps} or scale_epsilon={scale_epsilon}")
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, scale_epsilon=scale_epsilon)
        super().__init__(params, defaults)

    def _apply(self, p, state, group, t):
        beta1, beta2 = group["betas"]
        rms = torch.linalg.vector_norm(p) / p.numel() ** 0.5
        step_size = group["lr"] * (1 - beta2**t) ** 0.5 / (1 - beta1**t)
        scale = torch.clamp(rms, min=group["scale_epsilon"]) * step_size
        p.sub_(state["exp_avg"] / (state["exp_avg_sq"].sqrt() + group["eps"]) * scale)
        if group["weight_decay"]:
            p.mul_(1 - group["lr"] * group["weight_decay"])
