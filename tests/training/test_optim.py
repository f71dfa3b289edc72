import math

import pytest
import torch
from omegaconf import OmegaConf

from plm_toolkit.core.schema import OptimizerConfig
from plm_toolkit.training.optim import build_optimizer, build_scheduler, parameter_groups, schedule_factor


def optimizer_cfg(**kw):
    cfg = OmegaConf.structured(OptimizerConfig)
    cfg.d_model = 512
    for k, v in kw.items():
        cfg[k] = v
    return cfg


def lrs(cfg, steps, max_steps=1000):
    model = torch.nn.Linear(2, 2)
    opt = build_optimizer(model, cfg)
    sched = build_scheduler(opt, cfg, max_steps)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


@pytest.mark.parametrize("step", [1, 10, 100, 3999, 4000, 4001, 10000, 100000])
def test_noam_matches_the_formula(step):
    cfg = optimizer_cfg(name="adam", lr=2.0, schedule="noam", warmup_steps=4000, betas=[0.9, 0.98], eps=1e-9)
    expected = 2.0 * 512**-0.5 * min(step**-0.5, step * 4000**-1.5)
    assert schedule_factor(cfg, 10**6)(step - 1) * cfg.lr == pytest.approx(expected, rel=1e-12)


def test_noam_through_the_optimizer_peaks_at_warmup():
    cfg = optimizer_cfg(name="adam", lr=1.0, schedule="noam", warmup_steps=50)
    seen = lrs(cfg, 200)
    assert seen[0] == pytest.approx(512**-0.5 * 50**-1.5)
    assert max(range(200), key=seen.__getitem__) == 49  # step 50 (index 49) is the peak
    assert seen[199] == pytest.approx(512**-0.5 * 200**-0.5)


def test_linear_warmup_then_decay_to_zero():
    cfg = optimizer_cfg(lr=1e-3, schedule="linear", warmup_steps=10)
    seen = lrs(cfg, 100, max_steps=100)
    assert seen[0] == pytest.approx(1e-4)
    assert seen[9] == pytest.approx(1e-3)
    assert seen[54] == pytest.approx(1e-3 * (100 - 55) / 90)
    assert seen[99] == pytest.approx(0.0, abs=1e-12)


def test_warmup_ratio_and_cosine_floor():
    cfg = optimizer_cfg(lr=1.0, schedule="cosine", warmup_ratio=0.1, min_lr_ratio=0.1)
    factor = schedule_factor(cfg, 200)
    assert factor.warmup_steps == 20
    assert factor(19) == pytest.approx(1.0)
    assert factor(109) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert factor(199) == pytest.approx(0.1)


def test_weight_decay_skips_biases_and_layer_norm():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4), torch.nn.Embedding(5, 4))
    decay, no_decay = parameter_groups(model, 0.01)
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
    assert {id(p) for p in decay["params"]} == {id(model[0].weight), id(model[2].weight)}
    assert {id(p) for p in no_decay["params"]} == {id(model[0].bias), id(model[1].weight), id(model[1].bias)}


def test_adam_betas_and_eps_reach_torch():
    opt = build_optimizer(torch.nn.Linear(2, 2), optimizer_cfg(name="adam", betas=[0.9, 0.98], eps=1e-9))
    assert isinstance(opt, torch.optim.Adam)
    assert opt.defaults["betas"] == (0.9, 0.98) and opt.defaults["eps"] == 1e-9
