"""Checks shared by the validators: numbers in intervals, every trainer, optimizer, schedule and hardware key, and
the field ranges of any family's model config."""

from __future__ import annotations

import math

from plm_toolkit.config.resolve import model_class
from plm_toolkit.core.registry import MODELS
from plm_toolkit.core.schema import OptimizerConfig

DEFAULTS = OptimizerConfig()


def value_of(x) -> str:
    """A choice's name (an Enum member's value, or the string itself)."""
    return x.value if hasattr(x, "value") else str(x)


def finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def check_range(
    out: list[str],
    key: str,
    value,
    low: float,
    high: float = math.inf,
    *,
    low_open=False,
    high_open=False,
    what: str = "a finite number",
) -> None:
    """Append a message when ``value`` is not a finite number in the interval (NaN and infinities never pass)."""
    above = value > low if low_open else value >= low
    ok = finite(value) and above and (value < high if high_open else value <= high)
    if not ok:
        left, right = "(" if low_open else "[", ")" if high_open or high == math.inf else "]"
        upper = "inf" if high == math.inf else f"{high:g}"
        out.append(f"{key}={value}: expected {what} in {left}{low:g}, {upper}{right}")


# The decoding options (plm-generate's keys; a translation objective's or seq2seq task's evaluation search), their
# domains: (low, high, low_open, high_open, what). GNMT's length penalty ((5 + length) / 6)^alpha overflows a double
# beyond |alpha| of a few hundred over long outputs; papers use 0.6 to 1.
DECODING_RANGES = {
    "max_new_tokens": (1, math.inf, False, False, "an integer"),
    "max_length_b": (1, math.inf, False, False, "an integer"),
    "max_length_a": (0.0, math.inf, False, False, "a finite number"),
    "num_beams": (1, math.inf, False, False, "an integer"),
    "length_penalty": (-10.0, 10.0, False, False, "a finite number"),
    "temperature": (0.0, math.inf, True, False, "a finite number"),
    "top_k": (0, math.inf, False, False, "0 (off) or an integer"),
    "top_p": (0.0, 1.0, True, False, "a probability"),
}


def decoding_problems(options, prefix: str = "") -> list[str]:
    """A message for every decoding option of ``options`` (a config holding some of DECODING_RANGES' keys) outside
    its domain."""
    out: list[str] = []
    for key, (low, high, low_open, high_open, what) in DECODING_RANGES.items():
        if key in options:
            check_range(out, prefix + key, options[key], low, high, low_open=low_open, high_open=high_open, what=what)
    return out


# Keys that only some update rules read: the rules that do (a value other than the default elsewhere is refused,
# so that a recipe's setting never goes silently unused).
ONLY_FOR = {
    "momentum": ("sgd",),
    "bias_correction": ("lamb",),
    "parameter_scale": ("adamw",),
    "decay_rate": ("adafactor",),
    "clip_threshold": ("adafactor",),
    "initial_accumulator": ("adagrad",),
}


def optimizer_problems(opt, max_steps: int | None, d_model_from_backbone: bool = False) -> list[str]:
    """Every optimizer and schedule key out of its range, or set for an update rule that does not read it."""
    out: list[str] = []
    name, schedule = value_of(opt.name), value_of(opt.schedule)
    check_range(out, "optimizer.lr", opt.lr, 0.0, low_open=True)
    if len(opt.betas) != 2 or not all(finite(b) and 0.0 <= b < 1.0 for b in opt.betas):
        out.append(f"optimizer.betas={list(opt.betas)}: expected two values in [0, 1)")
    check_range(out, "optimizer.eps", opt.eps, 0.0, low_open=True)
    check_range(out, "optimizer.weight_decay", opt.weight_decay, 0.0)
    check_range(out, "optimizer.momentum", opt.momentum, 0.0)
    check_range(out, "optimizer.scale_epsilon", opt.scale_epsilon, 0.0)
    # torch's Adafactor needs 1 - t^-decay_rate in [0, 1) from the first step on; T5 used 0.8.
    check_range(out, "optimizer.decay_rate", opt.decay_rate, 0.0, 1.0, low_open=True)
    # An update clipped below RMS 1 is allowed by the paper's formula but not by torch (d >= 1).
    check_range(out, "optimizer.clip_threshold", opt.clip_threshold, 1.0)
    check_range(out, "optimizer.initial_accumulator", opt.initial_accumulator, 0.0)
    for key, users in ONLY_FOR.items():
        if name not in users and opt[key] != getattr(DEFAULTS, key):
            out.append(
                f"optimizer.{key}={opt[key]} is read by optimizer.name={' or '.join(users)} only, not by "
                f"optimizer.name={name}: leave it out or pick that optimizer"
            )
    if opt.warmup_steps < 0:
        out.append(f"optimizer.warmup_steps={opt.warmup_steps}: must be 0 (use warmup_ratio) or positive")
    if schedule in ("noam", "inverse_sqrt", "constant_then_inverse_sqrt") and opt.warmup_steps < 1:
        out.append(f"optimizer.schedule={schedule} needs optimizer.warmup_steps >= 1")
    check_range(out, "optimizer.warmup_ratio", opt.warmup_ratio, 0.0, 1.0, high_open=True)
    check_range(out, "optimizer.warmup_start", opt.warmup_start, 0.0, 1.0)
    check_range(out, "optimizer.min_lr_ratio", opt.min_lr_ratio, 0.0, 1.0)
    if opt.total_steps is not None and opt.total_steps < 1:
        out.append(f"optimizer.total_steps={opt.total_steps}: must be at least 1 (or null for the run's length)")
    elif (
        opt.total_steps is not None
        and max_steps is not None
        and opt.total_steps < max_steps
        and schedule in ("linear", "cosine")
    ):
        out.append(
            f"optimizer.total_steps={opt.total_steps} is shorter than trainer.max_steps={max_steps}: the "
            "schedule would sit at its floor; raise it or leave it null"
        )
    if schedule == "noam" and not d_model_from_backbone and opt.d_model < 1:
        out.append(f"optimizer.d_model={opt.d_model}: the noam schedule needs the model width (at least 1)")
    return out


def kernel_problems(opt, hardware) -> list[str]:
    """hardware.optimizer_implementation=fused for an update rule torch has no fused kernel of."""
    name = value_of(opt.name)
    if value_of(hardware.optimizer_implementation) != "fused":
        return []
    if name in ("lamb", "adafactor") or (name == "adamw" and opt.parameter_scale):
        rule = "adamw with optimizer.parameter_scale=true" if name == "adamw" else name
        return [f"hardware.optimizer_implementation=fused: optimizer.name={rule} has no fused kernel; use auto"]
    return []


def evaluation_only(t) -> bool:
    """plm-finetune's trainer.epochs=0 (or trainer.max_steps=0): evaluate the starting weights, train nothing."""
    return t.epochs == 0 or t.max_steps == 0


def training_problems(t, opt, d_model_from_backbone: bool = False, zero_length: bool = False) -> list[str]:
    """Range checks of every trainer and optimizer (and schedule) key, shared by plm-train and plm-finetune: NaN,
    infinities and negative values are refused here, before any data or model work. ``zero_length`` accepts a run
    of no steps (plm-finetune's evaluation only)."""
    out: list[str] = []
    if (t.max_steps is None) == (t.epochs is None):
        out.append(
            f"trainer.max_steps={t.max_steps} and trainer.epochs={t.epochs}: give exactly one length, the other null "
            "(e.g. trainer.epochs=null trainer.max_steps=1000, or trainer.max_steps=null trainer.epochs=3)"
        )
    least = 0 if zero_length else 1
    if t.max_steps is not None and t.max_steps < least:
        evaluate = " (0: evaluate only)" if zero_length else ""
        out.append(f"trainer.max_steps={t.max_steps}: must be at least {least}{evaluate} (or null with trainer.epochs)")
    if t.epochs is not None:
        check_range(out, "trainer.epochs", t.epochs, 0.0, low_open=not zero_length)
    for key in ("batch_size", "grad_accum_steps", "log_every"):
        if t[key] < 1:
            out.append(f"trainer.{key}={t[key]}: must be at least 1")
    for key in ("eval_every", "save_every", "keep_last", "eval_batches", "early_stopping_patience"):
        if t.get(key, 0) < 0:
            out.append(f"trainer.{key}={t[key]}: must be 0 (off) or positive")
    check_range(out, "trainer.clip_grad_norm", t.clip_grad_norm, 0.0)
    # A gain smaller than a negative threshold would count a worse evaluation as an improvement.
    check_range(out, "trainer.early_stopping_threshold", t.get("early_stopping_threshold", 0.0), 0.0,
                what="a change of the metric (0: any improvement counts)")  # fmt: skip
    if t.seed < 0:
        out.append(f"trainer.seed={t.seed}: must be 0 or positive")
    out += optimizer_problems(opt, t.max_steps, d_model_from_backbone)
    if t.get("time_budget") is not None:
        check_range(out, "trainer.time_budget", t.time_budget, 0.0, low_open=True)
    if t.get("signal_grace") is not None:
        check_range(out, "trainer.signal_grace", t.signal_grace, 0.0)
    return out


# Model config fields by name that every family range-checks: counts that may be 0, sizes and counts of at least 1
# (besides every *_size), positive numbers. A family adds its own fields (``fields_at_least_zero``, ... on its
# class) and its check_config what only it knows (heads that divide the width, ELMo's filters).
MODEL_AT_LEAST_ZERO = frozenset({"type_vocab_size", "position_offset"})
MODEL_AT_LEAST_ONE = frozenset({"num_layers", "num_heads", "max_position_embeddings"})
MODEL_ABOVE_ZERO = frozenset({"layer_norm_eps"})


def model_field_problems(m) -> list[str]:
    """Sizes, counts, dropout probabilities and epsilons of any family's model config (a width of 0 once built a
    model of empty tensors that trained without complaint)."""
    family = model_class(m["name"]) if m.get("name") in MODELS else None
    at_least_zero = MODEL_AT_LEAST_ZERO | getattr(family, "fields_at_least_zero", frozenset())
    at_least_one = MODEL_AT_LEAST_ONE | getattr(family, "fields_at_least_one", frozenset())
    above_zero = MODEL_ABOVE_ZERO | getattr(family, "fields_above_zero", frozenset())
    out: list[str] = []
    for key, value in m.items():
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if isinstance(value, int) and key in at_least_zero and value < 0:
            out.append(f"model.{key}={value}: must be 0 or positive")
        elif isinstance(value, int) and (key in at_least_one or key.endswith("_size")) and value < 1:
            out.append(f"model.{key}={value}: must be at least 1")
        elif key.endswith("dropout"):
            check_range(out, f"model.{key}", value, 0.0, 1.0, high_open=True)
        elif key in above_zero:
            check_range(out, f"model.{key}", value, 0.0, low_open=True)
        elif key == "initializer_range":
            check_range(out, f"model.{key}", value, 0.0)
    return out


def hardware_problems(h) -> list[str]:
    out: list[str] = []
    if h.max_overflow_steps < 1:
        out.append(f"hardware.max_overflow_steps={h.max_overflow_steps}: must be at least 1")
    check_range(out, "hardware.min_loss_scale", h.min_loss_scale, 0.0, low_open=True)
    if h.get("num_threads", 0) < 0:
        out.append(f"hardware.num_threads={h.num_threads}: must be 0 (torch's default) or a positive count")
    if h.get("peak_tflops") is not None:
        check_range(out, "hardware.peak_tflops", h.peak_tflops, 0.0)
    backend = h.get("compile_backend", "inductor")
    if h.get("compile") is not False and backend != "inductor":
        import torch._dynamo

        if backend not in torch._dynamo.list_backends(exclude_tags=()):
            out.append(
                f"hardware.compile_backend={backend}: not a torch.compile backend; expected inductor, aot_eager, eager "
                "or another of torch._dynamo.list_backends(exclude_tags=())"
            )
    return out
