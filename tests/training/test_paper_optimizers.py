"""LAMB, Adafactor, Adagrad and AdamW with parameter scaling, step for step against their formulas and references.

The references are written out here in float64 from the papers and the original code (google-research/albert's
lamb_optimizer.py, TensorFlow Addons' LAMB, bilm-tf's Adagrad, nanoT5's AdamWScale), or taken from transformers'
Adafactor; the parameters are odd-sized and include the tensors LAMB exempts (biases, LayerNorm weights) and a
matrix of zeros (the trust ratio's fallback of 1).
"""

import math
import re

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

import plm_toolkit.commands.train  # noqa: F401  (registers the schemas)
from plm_toolkit.core.schema import OptimizerConfig
from plm_toolkit.training.optim import build_optimizer, build_scheduler, schedule_factor


class Tiny(torch.nn.Module):
    """A linear layer, a LayerNorm, a 3-d tensor and a matrix of zeros: every case the update rules tell apart."""

    def __init__(self):
        super().__init__()
        self.dense = torch.nn.Linear(7, 5)
        self.layer_norm = torch.nn.LayerNorm(5)
        self.cube = torch.nn.Parameter(torch.randn(2, 3, 4))
        self.zeros = torch.nn.Parameter(torch.zeros(3, 6))
        with torch.no_grad():
            self.layer_norm.weight.add_(0.1 * torch.randn(5))


def optimizer_cfg(name, **values):
    cfg = OmegaConf.structured(OptimizerConfig)
    cfg.name, cfg.d_model = name, 32
    for key, value in values.items():
        cfg[key] = value
    return cfg


def preset(option: str):
    """The optimizer group's preset as plm-train composes it."""
    with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
        return compose("train", overrides=[f"optimizer={option}"]).optimizer


def gradients(model: torch.nn.Module, steps: int) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(7)
    return [
        {
            name: torch.randn(p.shape, generator=generator) * 10 ** (-2.5 * ((k + 2) % 3))
            for name, p in model.named_parameters()
        }
        for k in range(steps)
    ]


def snapshot(model: torch.nn.Module) -> dict[str, np.ndarray]:
    return {name: p.detach().double().numpy().copy() for name, p in model.named_parameters()}


def trajectory(make, steps: int, lr_at=None) -> tuple[dict[str, np.ndarray], list[dict[str, np.ndarray]]]:
    """The starting parameters and those after each of ``steps`` steps of fixed gradients, for the optimizer (and
    scheduler, or None) that ``make(model)`` builds; ``lr_at(t)`` sets the rate of step t by hand."""
    torch.manual_seed(0)
    model = Tiny()
    start, seen = snapshot(model), []
    optimizer, scheduler = make(model)
    for t, grads in enumerate(gradients(model, steps), start=1):
        for group in optimizer.param_groups if lr_at else ():
            group["lr"] = lr_at(t)
        for name, p in model.named_parameters():
            p.grad = grads[name].clone()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        seen.append(snapshot(model))
    return start, seen


def run_ours(cfg, steps: int):
    """Our optimizer and schedule for ``cfg`` (see ``trajectory``)."""

    def make(model):
        optimizer = build_optimizer(model, cfg)
        return optimizer, build_scheduler(optimizer, cfg, 100)

    return trajectory(make, steps)


def as_numpy(steps: list[dict[str, torch.Tensor]]) -> list[dict[str, np.ndarray]]:
    return [{k: v.double().numpy() for k, v in step.items()} for step in steps]


def assert_steps_equal(ours, reference, tolerance=1e-6):
    for t, (a, b) in enumerate(zip(ours, reference, strict=True), start=1):
        for name in a:
            np.testing.assert_allclose(a[name], b[name], rtol=tolerance, atol=tolerance, err_msg=f"{name} step {t}")


# ALBERT's exclusions, by name (optimization.py): what our shape rule must exempt too.
ALBERT_EXCLUDED = ["LayerNorm", "layer_norm", "bias"]


def lamb_reference(start, grads, lr, betas, eps, weight_decay, bias_correction):
    """google-research/albert's LAMBOptimizer.apply_gradients (bias_correction=False) and TensorFlow Addons' LAMB
    (True), transcribed operation by operation in float64."""
    beta1, beta2 = betas
    params = {k: v.copy() for k, v in start.items()}
    m = {k: np.zeros_like(v) for k, v in params.items()}
    v = {k: np.zeros_like(v) for k, v in params.items()}
    out = []
    for t, step in enumerate(grads, start=1):
        for name, grad in step.items():
            m[name] = beta1 * m[name] + (1.0 - beta1) * grad
            v[name] = beta2 * v[name] + (1.0 - beta2) * np.square(grad)
            m_hat, v_hat = (
                (m[name] / (1 - beta1**t), v[name] / (1 - beta2**t)) if bias_correction else (m[name], v[name])
            )
            update = m_hat / (np.sqrt(v_hat) + eps)
            excluded = any(re.search(r, name) for r in ALBERT_EXCLUDED)
            if weight_decay and not excluded:
                update = update + weight_decay * params[name]
            ratio = 1.0
            if not excluded:
                w_norm, g_norm = np.linalg.norm(params[name]), np.linalg.norm(update)
                ratio = (w_norm / g_norm if g_norm > 0 else 1.0) if w_norm > 0 else 1.0
            params[name] = params[name] - ratio * lr * update
        out.append({k: p.copy() for k, p in params.items()})
    return out


@pytest.mark.parametrize("bias_correction", [False, True], ids=["albert", "tf_addons"])
def test_lamb_matches_the_tensorflow_references(bias_correction):
    cfg = optimizer_cfg("lamb", lr=0.01, betas=[0.9, 0.999], eps=1e-6, weight_decay=0.01, schedule="constant")
    cfg.bias_correction = bias_correction
    start, ours = run_ours(cfg, 6)
    grads = as_numpy(gradients(Tiny(), 6))
    assert_steps_equal(ours, lamb_reference(start, grads, 0.01, (0.9, 0.999), 1e-6, 0.01, bias_correction))


def test_lamb_trust_ratio_makes_a_matrix_step_proportional_to_its_norm():
    """Algorithm 2: the first step of a matrix moves it by lr * ||w|| whatever its gradient's scale; the zero
    matrix (ratio 1) and the exempt LayerNorm weight move by lr * ||u|| instead."""
    cfg = optimizer_cfg("lamb", lr=0.01, weight_decay=0.0, schedule="constant")
    start, ours = run_ours(cfg, 1)
    moved = {name: np.linalg.norm(ours[0][name] - start[name]) for name in start}
    assert moved["dense.weight"] == pytest.approx(0.01 * np.linalg.norm(start["dense.weight"]), rel=1e-5)
    assert moved["cube"] == pytest.approx(0.01 * np.linalg.norm(start["cube"]), rel=1e-5)
    # Adam's first step is lr * g / (|g| + eps) element by element.
    first = {name: g.double().numpy() for name, g in gradients(Tiny(), 1)[0].items()}
    for name in ("zeros", "layer_norm.weight"):
        adam = 0.01 * np.linalg.norm(first[name] / (np.abs(first[name]) + 1e-6))
        assert moved[name] == pytest.approx(adam, rel=1e-5)


def test_adafactor_matches_transformers_relative_step():
    """optimizer=adafactor (T5: relative step min(1e-2, 1/sqrt(t)), parameter scale, clipping d=1, beta2 decay
    t^-0.8) against transformers' Adafactor with its defaults (relative_step, scale_parameter, no warm-up init)."""
    from transformers.optimization import Adafactor

    cfg = preset("adafactor")
    _, ours = run_ours(cfg, 8)
    _, reference = trajectory(lambda model: (Adafactor(model.parameters(), lr=None), None), 8)
    assert_steps_equal(ours, reference)


def test_adafactor_with_t5_inverse_square_root_matches_transformers_explicit_lr():
    """T5 v1.0's explicit learning rate 1/sqrt(max(t, k)) (here k = 3, so that the decay starts within the test)
    times the parameter scale: transformers' Adafactor with relative_step=False and the same rate per step."""
    from transformers.optimization import Adafactor

    k = 3
    cfg = optimizer_cfg("adafactor", lr=k**-0.5, eps=1e-15, weight_decay=0.0, betas=[0.9, 0.999])
    cfg.schedule, cfg.warmup_steps = "constant_then_inverse_sqrt", k
    _, ours = run_ours(cfg, 8)
    explicit = lambda model: (Adafactor(model.parameters(), lr=1.0, relative_step=False), None)
    _, reference = trajectory(explicit, 8, lr_at=lambda t: 1 / math.sqrt(max(t, k)))
    assert_steps_equal(ours, reference)


def test_adagrad_matches_bilm_tf_formula():
    """bilm-tf: tf.train.AdagradOptimizer(0.2, initial_accumulator_value=1.0): a += g^2; w -= lr g / sqrt(a)
    (torch adds eps = 1e-10 to the root)."""
    cfg = preset("adagrad")
    start, ours = run_ours(cfg, 5)
    params = {k: v.copy() for k, v in start.items()}
    accumulator = {k: np.full_like(v, 1.0) for k, v in params.items()}
    reference = []
    for step in as_numpy(gradients(Tiny(), 5)):
        for name, grad in step.items():
            accumulator[name] += np.square(grad)
            params[name] = params[name] - 0.2 * grad / (np.sqrt(accumulator[name]) + 1e-10)
        reference.append({k: p.copy() for k, p in params.items()})
    assert_steps_equal(ours, reference)


def test_adamw_with_parameter_scale_matches_nanot5():
    """nanoT5's AdamWScale: bias-corrected Adam whose step is multiplied by max(1e-3, RMS(w)), then w -= lr wd w."""
    cfg = optimizer_cfg("adamw", lr=2e-2, betas=[0.9, 0.999], eps=1e-6, weight_decay=0.01, schedule="constant")
    cfg.parameter_scale = True
    start, ours = run_ours(cfg, 5)
    params = {k: v.copy() for k, v in start.items()}
    m = {k: np.zeros_like(v) for k, v in params.items()}
    v = {k: np.zeros_like(v) for k, v in params.items()}
    reference = []
    for t, step in enumerate(as_numpy(gradients(Tiny(), 5)), start=1):
        for name, grad in step.items():
            m[name] = 0.9 * m[name] + 0.1 * grad
            v[name] = 0.999 * v[name] + 0.001 * grad**2
            step_size = 2e-2 * math.sqrt(1 - 0.999**t) / (1 - 0.9**t)
            step_size *= max(1e-3, np.linalg.norm(params[name]) / math.sqrt(params[name].size))
            params[name] = params[name] - step_size * m[name] / (np.sqrt(v[name]) + 1e-6)
            decays = params[name].ndim >= 2
            params[name] = params[name] * (1 - 2e-2 * 0.01) if decays else params[name]
        reference.append({k: p.copy() for k, p in params.items()})
    assert_steps_equal(ours, reference)


@pytest.mark.parametrize("step", [1, 2, 9999, 10000, 10001, 40000, 2**19])
def test_constant_then_inverse_sqrt_is_t5s_schedule(step):
    """T5 (Sec. 3.1.2): lr = 1 / sqrt(max(n, k)), k = 10^4, from lr = 0.01 and warmup_steps = 10^4."""
    cfg = optimizer_cfg("adafactor", lr=0.01, schedule="constant_then_inverse_sqrt", warmup_steps=10**4)
    assert cfg.lr * schedule_factor(cfg, 2**19)(step - 1) == pytest.approx(1 / math.sqrt(max(step, 10**4)), rel=1e-12)


@pytest.mark.parametrize("step", [1, 5000, 9999, 10000, 10001, 30000, 65536])
def test_warmup_from_half_then_cosine_is_nanot5s_schedule(step):
    """nanoT5 (default.yaml): LinearLR from 0.5 to 1 over 10^4 steps, then cosine to 1e-5 over the rest of 2^16."""
    cfg = optimizer_cfg("adamw", lr=2e-2, schedule="cosine", warmup_steps=10**4, warmup_start=0.5)
    cfg.min_lr_ratio = 1e-5 / 2e-2
    if step <= 10**4:
        expected = 2e-2 * (0.5 + 0.5 * step / 10**4)
    else:
        expected = 1e-5 + (2e-2 - 1e-5) * 0.5 * (1 + math.cos(math.pi * (step - 10**4) / (2**16 - 10**4)))
    assert cfg.lr * schedule_factor(cfg, 2**16)(step - 1) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    "overrides,expected",
    [
        (["optimizer=lamb", "optimizer.eps=0"], "optimizer.eps=0.0: expected a finite number in (0, inf)"),
        (["optimizer=lamb", "optimizer.weight_decay=-0.01"], "optimizer.weight_decay=-0.01: expected a finite number"),
        (["optimizer=lamb", "optimizer.momentum=0.9"], "optimizer.momentum=0.9 is read by optimizer.name=sgd only"),
        (["optimizer=adafactor", "optimizer.scale_epsilon=nan"], "optimizer.scale_epsilon=nan: expected a finite"),
        (
            ["optimizer=adafactor", "optimizer.decay_rate=0"],
            "optimizer.decay_rate=0.0: expected a finite number in (0, 1]",
        ),
        (["optimizer=adafactor", "optimizer.bias_correction=false"], "is read by optimizer.name=lamb only"),
        (["optimizer=adagrad", "optimizer.lr=inf"], "optimizer.lr=inf: expected a finite number in (0, inf)"),
        (
            ["optimizer=adagrad", "optimizer.decay_rate=0.5"],
            "optimizer.decay_rate=0.5 is read by optimizer.name=adafactor",
        ),
        (["optimizer=adagrad", "optimizer.parameter_scale=true"], "is read by optimizer.name=adamw only"),
        (
            ["optimizer.parameter_scale=true", "hardware.optimizer_implementation=fused"],
            "parameter_scale=true has no fused",
        ),
        (["optimizer.warmup_start=-0.5"], "optimizer.warmup_start=-0.5: expected a finite number in [0, 1]"),
        (["optimizer=lamb", "optimizer.betas=[0.9,1.0]"], "optimizer.betas=[0.9, 1.0]: expected two values in [0, 1)"),
        (["optimizer=adafactor", "optimizer.clip_threshold=0.5"], "optimizer.clip_threshold=0.5: expected a finite"),
    ],
)
def test_paper_optimizer_keys_out_of_range_are_refused(overrides, expected):
    from plm_toolkit.config.validate import validate
    from plm_toolkit.core.errors import ConfigError

    with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    with pytest.raises(ConfigError) as caught:
        validate(cfg)
    assert expected in str(caught.value), str(caught.value)
