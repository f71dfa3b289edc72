"""One check of the composed config before any data or model work.

Hydra and the dataclass schemas already refuse misspelt keys, wrong types and unknown group options. This step
refuses keys added with ``+`` that no schema declares, numbers out of range (NaN and infinities included), and the
combinations that are each valid alone but impossible together, and names the keys and the fix.
"""

from __future__ import annotations

import inspect
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from plm_toolkit.config.checks import (
    check_range,
    kernel_problems,
    optimizer_problems,
    phase_problems,
    recipe_problems,
)
from plm_toolkit.config.numbers import merge, number_problems
from plm_toolkit.config.overrides import keep_typed_text
from plm_toolkit.config.resolve import model_class, objective_class, resolve_run, task_class, tokenizer_kind
from plm_toolkit.core.capabilities import CHARACTERS, SEGMENTS
from plm_toolkit.core.errors import ConfigError, PlmError
from plm_toolkit.core.names import did_you_mean, key_names
from plm_toolkit.core.registry import MODELS, OBJECTIVES, TASKS
from plm_toolkit.data.sources.parallel_text import resolve
from plm_toolkit.data.sources.pieces import source_problems
from plm_toolkit.data.sources.user_files import not_a_file
from plm_toolkit.data.store.given import KEYS, given_entries
from plm_toolkit.data.tokenization.tokenizer import MAXIMUM_VOCABULARY, MINIMUM_VOCABULARY


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
    for key in ("eval_every", "save_every", "keep_last", "eval_batches"):
        if t[key] < 0:
            out.append(f"trainer.{key}={t[key]}: must be 0 (off) or positive")
    check_range(out, "trainer.clip_grad_norm", t.clip_grad_norm, 0.0)
    if t.seed < 0:
        out.append(f"trainer.seed={t.seed}: must be 0 or positive")
    out += optimizer_problems(opt, t.max_steps, d_model_from_backbone)
    if t.get("time_budget") is not None:
        check_range(out, "trainer.time_budget", t.time_budget, 0.0, low_open=True)
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


def tokenizer_problems(cfg: DictConfig) -> list[str]:
    """The sizes of a vocabulary to train: at least what its kind always holds, at most what 32-bit token ids count
    (the tokenizers library raised OverflowError for a negative one; vocab_size=3 trained 102 tokens without a
    word). A trained vocabulary that the corpus makes larger still is refused after training (data/tokenization/tokenizer.py)."""
    t, kind = cfg.data.tokenizer, tokenizer_kind(cfg)
    out: list[str] = []
    if t.min_frequency < 0:
        out.append(f"data.tokenizer.min_frequency={t.min_frequency}: must be 0 or positive")
    if t.path or kind not in MINIMUM_VOCABULARY:
        return out
    least, what = MINIMUM_VOCABULARY[kind]
    if not least <= t.vocab_size <= MAXIMUM_VOCABULARY:
        out.append(
            f"data.tokenizer.vocab_size={t.vocab_size}: expected a size from {least} (a {kind} vocabulary holds "
            f"{what}) to {MAXIMUM_VOCABULARY} (2^31 - 1: token ids are 32-bit)"
        )
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
    return out


def unknown_keys(cfg: DictConfig) -> list[str]:
    """Keys that no schema declares: a typo Hydra let through because it was added with ``+`` (``+trainer.max_step=5``
    would otherwise be stored and ignored). Each message suggests the closest real key."""
    out: list[str] = []

    def walk(node: DictConfig, prefix: str) -> None:
        names = key_names(OmegaConf.get_type(node))
        for key in node:
            full = f"{prefix}{key}"
            if names and key not in names:
                valid = "" if did_you_mean(str(key), names) else f" (valid keys: {', '.join(names)})"
                out.append(f"{full}: unknown key{did_you_mean(str(key), names, prefix)}{valid}")
                continue
            child = node._get_node(key)
            if isinstance(child, DictConfig) and not child._is_missing() and not child._is_none():
                walk(child, f"{full}.")

    walk(cfg, "")
    return out


def file_problems(d) -> list[str]:
    return source_problems(d)


def store_problems(d) -> list[str]:
    """The token store's keys (docs/data-store.md)."""
    out = []
    if d.get("num_proc") is not None and d.num_proc < 1:
        out.append(f"data.num_proc={d.num_proc}: must be at least 1 (or null for the available cores)")
    if d.get("shard_bytes") is not None and d.shard_bytes < 1 << 12:
        out.append(f"data.shard_bytes={d.shard_bytes}: must be at least 4096")
    if d.tokenizer.get("train_sample_bytes", 1) < 1:
        out.append(f"data.tokenizer.train_sample_bytes={d.tokenizer.train_sample_bytes}: must be at least 1")
    return out


def parallel_problems(d) -> list[str]:
    """data=parallel: every entry names a prefix of two language files or a JSONL file; batches hold a sentence."""
    out: list[str] = []
    for key in ("train_files", "validation_files"):
        for spec in d[key]:
            try:
                resolve(spec, d.source_lang, d.target_lang, f"data.{key}")
            except PlmError as err:
                out.append(str(err))
    if d.source_lang == d.target_lang:
        out.append(f"data.source_lang and data.target_lang are both {d.source_lang!r}; give two languages")
    if d.max_tokens < d.max_seq_len:
        out.append(
            f"data.max_tokens={d.max_tokens} is below data.max_seq_len={d.max_seq_len}: a batch must hold at "
            "least one sentence of the longest length"
        )
    if d.max_sentences < 0:
        out.append(f"data.max_sentences={d.max_sentences}: must be 0 (no limit) or positive")
    return out


def problems(cfg: DictConfig, derive_plan: bool = True) -> list[str]:
    """Every impossible setting found, one message each; ``derive_plan=False`` when a number is none a key can mean
    (the plan computes with them: span corruption's window search never ends for a length of 2^70)."""
    out: list[str] = []
    m, o, d, t, opt = cfg.model, cfg.objective, cfg.data, cfg.trainer, cfg.optimizer
    if m.name not in MODELS:
        return [f"model.name={m.name}: unknown model; valid: {', '.join(MODELS.names())}"]
    if o.name not in OBJECTIVES:
        return [f"objective.name={o.name}: unknown objective; valid: {', '.join(OBJECTIVES.names())}"]
    # The rest would only list what follows from the wrong family.
    if recipe_problems(cfg):
        return recipe_problems(cfg)

    provided = model_class(m.name).capabilities
    needed = objective_class(o.name).required_capabilities
    if not needed <= provided:
        lacking = ", ".join(sorted(needed - provided))
        able = [n for n in MODELS.names() if needed <= model_class(n).capabilities]
        out.append(
            f"objective={o.name} needs a model that is {lacking}; model={m.name} is not. "
            f"Models that can serve it: {', '.join(able) or 'none yet'}"
        )
    if CHARACTERS in provided and CHARACTERS not in needed:
        out.append(
            f"model={m.name} reads words as characters; objective={o.name} feeds token ids. Objectives for it: "
            + ", ".join(n for n in OBJECTIVES.names() if CHARACTERS in objective_class(n).required_capabilities)
        )
    if SEGMENTS in needed and m.get("type_vocab_size", 2) < 2:
        out.append(
            f"objective={o.name} feeds two segments (token types 0 and 1); model.type_vocab_size="
            f"{m.type_vocab_size} has one (RoBERTa's): set model.type_vocab_size=2 or pick objective=mlm"
        )
    sizes = model_field_problems(m)
    out += sizes
    checked = len(out)
    for check in (
        lambda: objective_class(o.name).check_config(o),
        lambda: objective_class(o.name).check_data(o, d),
        *([] if sizes else [lambda: model_class(m.name).check_config(m)]),
    ):
        try:
            check()
        except ConfigError as err:
            out.append(str(err))
    # The plan is derived from the objective's and model's values: only once they passed (span corruption's window
    # search never ends for objective.noise_density >= 1).
    plan = None
    if len(out) == checked and derive_plan:
        try:
            plan = resolve_run(cfg).plan
        except ConfigError as err:
            out.append(str(err))
    wanted = objective_class(o.name).natural_layout
    parallel = "source_lang" in d
    if wanted == "parallel" and not parallel:
        out.append(f"objective={o.name} trains on sentence pairs: set data=parallel (data.train_files=[corpus/train])")
    elif parallel and wanted != "parallel":
        out.append(
            f"data=parallel holds sentence pairs, which objective={o.name} does not read; pick "
            "objective=translation or another data preset"
        )

    longest = model_class(m.name).max_length(m)
    if longest is not None and d.max_seq_len > longest:
        offset = m.get("position_offset", 0)
        shifted = f" - model.position_offset={offset}" if offset else ""
        out.append(
            f"data.max_seq_len={d.max_seq_len} exceeds model.max_position_embeddings={m.max_position_embeddings}"
            f"{shifted}; lower data.max_seq_len or raise model.max_position_embeddings"
        )
    out += phase_problems(t, plan.layout if plan else "", bool(plan and plan.streams), longest)
    out += model_class(m.name).run_problems(cfg)
    if d.max_seq_len < 8:
        out.append(f"data.max_seq_len={d.max_seq_len}: needs at least 8 tokens")
    if d.num_workers < 0:
        out.append(f"data.num_workers={d.num_workers}: must be 0 (load in the training process) or positive")
    out += store_problems(d)
    out += tokenizer_problems(cfg)
    if m.get("vocab_size") is not None and d.tokenizer.path is None and m.vocab_size < d.tokenizer.vocab_size:
        out.append(
            f"model.vocab_size={m.vocab_size} is smaller than data.tokenizer.vocab_size={d.tokenizer.vocab_size}; "
            "leave model.vocab_size=null to take the tokenizer's size"
        )
    for key in ("short_seq_prob", "random_next_prob"):
        if not 0.0 <= d[key] <= 1.0:
            out.append(f"data.{key}={d[key]}: expected a probability in [0, 1]")

    if parallel and not d.train_files:
        out.append(
            "data.train_files is empty: give data.train_files=[corpus/train] (reads corpus/train.<lang> for "
            "data.source_lang and data.target_lang) or a .jsonl file with one key per language"
        )
    elif not d.train_files and not d.dataset_path and not d.get("store"):
        out.append("data.train_files is empty and data.dataset_path is not set: give one (or use data=default)")
    out += parallel_problems(d) if parallel else file_problems(d)
    if d.dataset_path and not Path(d.dataset_path).expanduser().is_dir():
        out.append(f"data.dataset_path={d.dataset_path} is not a directory written by datasets' save_to_disk")
    given = [f"data.{KEYS[split]}" for split in KEYS if not parallel and given_entries(d, split)]
    if d.dataset_path and given:  # the saved dataset replaces the files: they would be ignored
        out.append(f"data.dataset_path and {' and '.join(given)} are both given; the saved dataset replaces the "
                   "files, which would be ignored: give one")  # fmt: skip
    if d.tokenizer.path and not_a_file(d.tokenizer.path):
        out.append(
            f"data.tokenizer.path={d.tokenizer.path} is not a file ({not_a_file(d.tokenizer.path)}); expected a "
            "tokenizer.json, vocab.txt or vocab.json"
        )

    if cfg.hardware.get("unpad"):
        accepts_positions = "position_ids" in inspect.signature(model_class(m.name).forward).parameters
        if not objective_class(o.name).reads_packed_rows or not accepts_positions:
            packed = ", ".join(n for n in OBJECTIVES.names() if objective_class(n).reads_packed_rows)
            out.append(
                f"hardware.unpad=true packs sequences for objective={packed} on absolute-position models (BERT, "
                f"RoBERTa, ALBERT, ELECTRA) only; objective={o.name} with model={m.name} keeps padded rows: set "
                "hardware.unpad=false"
            )
    out += training_problems(t, opt) + hardware_problems(cfg.hardware) + kernel_problems(opt, cfg.hardware)
    return out


def finetune_problems(cfg: DictConfig) -> list[str]:
    """Every impossible setting of a plm-finetune config, one message each."""
    out: list[str] = []
    if OmegaConf.is_missing(cfg.model, "checkpoint"):
        out.append("model.checkpoint is not set: give a plm-train checkpoint or a local Hugging Face folder")
    elif not Path(cfg.model.checkpoint).expanduser().exists():
        out.append(f"model.checkpoint={cfg.model.checkpoint}: no such file or directory")
    if cfg.task.name not in TASKS:
        return out + [f"task.name={cfg.task.name}: unknown task; valid: {', '.join(TASKS.names())}"]
    try:
        task_class(cfg.task.name).check_config(cfg.task)
    except ConfigError as err:
        out.append(str(err))
    d = cfg.data
    if evaluation_only(cfg.trainer):
        if not d.validation_file:
            zero = "trainer.epochs=0" if cfg.trainer.epochs == 0 else "trainer.max_steps=0"
            out.append(f"{zero} evaluates without training: give data.validation_file")
    elif not d.train_file:
        out.append("data.train_file is not set: give the task's training file (or evaluate only: trainer.epochs=0)")
    out += task_class(cfg.task.name).file_problems(cfg.task, d)
    if d.max_seq_len < 8:
        out.append(f"data.max_seq_len={d.max_seq_len}: needs at least 8 tokens")
    if d.num_workers < 0:
        out.append(f"data.num_workers={d.num_workers}: must be 0 (load in the training process) or positive")
    for key in ("max_train_samples", "max_eval_samples"):
        if d[key] is not None and d[key] < 1:
            out.append(f"data.{key}={d[key]}: must be at least 1 (or null for all)")
    if cfg.model.dropout is not None and not 0.0 <= cfg.model.dropout < 1.0:
        out.append(f"model.dropout={cfg.model.dropout}: expected a probability in [0, 1)")
    for key in ("labels", "label_words"):
        names = [str(name) for name in cfg.task.get(key) or []]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            out.append(
                f"task.{key}={names}: {', '.join(map(repr, repeated))} more than once; each class needs a name of its "
                "own (a repeated one leaves a class no example can have)"
            )
    if cfg.trainer.phases:
        out.append("trainer.phases are for pretraining (plm-train); a fine-tuning run has one length")
    if cfg.hardware.get("unpad"):
        out.append(
            "hardware.unpad=true is for pretraining (plm-train objective=mlm); fine-tuning trims each batch to its "
            "longest row and groups rows by length instead (trainer.group_by_length)"
        )
    f = cfg.finetune
    for key in ("encoder_hidden_size", "encoder_layers"):
        if f[key] < 1:
            out.append(f"finetune.{key}={f[key]}: must be at least 1")
    if not 0.0 <= f.dropout < 1.0:
        out.append(f"finetune.dropout={f.dropout}: expected a probability in [0, 1)")
    out += training_problems(cfg.trainer, cfg.optimizer, d_model_from_backbone=True, zero_length=True)
    return out + hardware_problems(cfg.hardware) + kernel_problems(cfg.optimizer, cfg.hardware)


def validate(cfg: DictConfig) -> None:
    """Raise one ConfigError listing every problem on one line; unknown keys first, alone (the rest may hinge on
    them). First, the text keys the command line set get the text as typed (``keep_typed_text``)."""
    keep_typed_text(cfg)
    found = unknown_keys(cfg)
    if not found:
        numbers = number_problems(cfg)
        found = merge(finetune_problems(cfg) if "task" in cfg else problems(cfg, derive_plan=not numbers), numbers)
    if found:
        raise ConfigError("invalid configuration: " + "; ".join(found))
