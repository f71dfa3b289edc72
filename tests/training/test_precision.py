"""Device and precision choices, and the fp16 loss scaler's skip-and-stop behaviour."""

import math

import pytest
import torch
from torch import nn

from plm_toolkit.commands.train import run
from plm_toolkit.core.errors import ConfigError, TrainingError
from plm_toolkit.training.distributed import ProcessInfo
from plm_toolkit.training.precision import LossScaler, Runtime, resolve_runtime

from .conftest import read_metrics


def fp16_runtime_on_cpu() -> Runtime:
    # GradScaler runs on CPU tensors too, which lets the scaler's logic be tested without a GPU.
    return Runtime(torch.device("cpu"), "fp16", ProcessInfo(), ddp=False, backend="gloo")


def one_step(scaler: LossScaler, model: nn.Linear, optimizer, poison: bool) -> bool:
    loss = model(torch.ones(1, 3)).sum()
    scaler.scale(loss).backward()
    if poison:
        model.weight.grad.fill_(float("inf"))
    scaler.unscale_(optimizer)
    taken = scaler.step(optimizer)
    optimizer.zero_grad(set_to_none=True)
    return taken


def test_overflowing_step_is_skipped_and_the_scale_halves():
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = LossScaler(fp16_runtime_on_cpu(), min_scale=1.0, max_overflow_steps=3)
    before = model.weight.detach().clone()
    scale = scaler.scaler.get_scale()
    assert not one_step(scaler, model, optimizer, poison=True)
    assert torch.equal(model.weight, before) and scaler.scaler.get_scale() == scale / 2
    assert one_step(scaler, model, optimizer, poison=False)
    assert not torch.equal(model.weight, before)


def test_repeated_overflow_at_the_minimum_scale_stops_with_advice():
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = LossScaler(fp16_runtime_on_cpu(), min_scale=2.0**14, max_overflow_steps=3)
    # 65536 -> 32768 -> 16384 are overflows above the minimum; then three at or below it stop the run.
    for _ in range(4):
        assert not one_step(scaler, model, optimizer, poison=True)
    with pytest.raises(TrainingError, match="overflowed 3 steps in a row .* hardware.precision=bf16"):
        one_step(scaler, model, optimizer, poison=True)


def test_a_good_step_resets_the_overflow_count_and_state_round_trips():
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = LossScaler(fp16_runtime_on_cpu(), min_scale=2.0**16, max_overflow_steps=2)
    assert not one_step(scaler, model, optimizer, poison=True)
    assert scaler.overflows_at_min == 1
    assert one_step(scaler, model, optimizer, poison=False)
    assert scaler.overflows_at_min == 0
    other = LossScaler(fp16_runtime_on_cpu(), min_scale=2.0**16, max_overflow_steps=2)
    other.load_state_dict(scaler.state_dict())
    assert other.scaler.get_scale() == scaler.scaler.get_scale()


def test_fp32_and_bf16_scalers_are_plain_steps():
    scaler = LossScaler(Runtime(torch.device("cpu"), "bf16", ProcessInfo(), False, "gloo"), 1.0, 3)
    assert not scaler.enabled
    loss = torch.tensor(2.0, requires_grad=True)
    assert scaler.scale(loss) is loss


@pytest.mark.parametrize(
    "device,precision,expected",
    [
        ("cpu", "fp16", "hardware.precision=fp16 needs a CUDA device"),
        pytest.param(
            "cuda",
            "auto",
            "hardware.device=cuda but no CUDA device is visible",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible"),
        ),
    ],
)
def test_impossible_hardware_is_refused(device, precision, expected):
    hw = type("HW", (), {"device": device, "precision": precision, "distributed": "auto", "backend": "auto"})
    with pytest.raises(ConfigError, match=expected):
        resolve_runtime(hw)


def test_cpu_bf16_autocast_trains(make_config, tmp_path):
    run(make_config("hardware=cpu_bf16", "trainer.max_steps=4", "optimizer.lr=2e-3"), tmp_path)
    losses = [r["loss"] for r in read_metrics(tmp_path) if "lr" in r]
    assert len(losses) == 4 and all(math.isfinite(x) for x in losses)


@pytest.mark.gpu
@pytest.mark.parametrize("hardware", ["cuda_bf16", "cuda_fp16"])
def test_cuda_mixed_precision_loss_falls(make_config, tmp_path, hardware):
    run(make_config(f"hardware={hardware}", "trainer.max_steps=30", "optimizer.lr=2e-3"), tmp_path)
    losses = [r["loss"] for r in read_metrics(tmp_path) if "lr" in r]
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.5
