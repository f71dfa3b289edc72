"""A run's data, from one entry point: ``build_run_data`` (plan + data config + seed + the checkpoint's tokenizer ->
the tokenizer, the examples of each split in the objective's layout, each phase's examples), which both plm-train
and plm-prepare call. ``prepare_pretraining_data`` builds one length's examples as the plan's layout prepares them
(``data/layouts/registry.py``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf
from tokenizers import Tokenizer

from plm_toolkit.core.choices import choice
from plm_toolkit.data.layouts.blend_sources import prepare_blended_data
from plm_toolkit.data.layouts.examples import PretrainingData
from plm_toolkit.data.layouts.plan import DataPlan
from plm_toolkit.data.layouts.registry import prepare_layout_data, resumed_data
from plm_toolkit.data.store.token_store import TokenStore
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.data.units.corpus import TaggedSources, tagged_sources

if TYPE_CHECKING:
    from plm_toolkit.core.data_schema import DataConfig


@dataclass
class RunData:
    tokenizer: Tokenizer
    vocab: Vocab
    train: Any
    validation: Any | None
    # The token store the examples are read from.
    store: TokenStore | None = None
    # Translation: the validation pairs' text as read, which decoding is scored against.
    references: list[str] = field(default_factory=list)
    # trainer.phases: each phase's examples in order (the first phase's are also ``train`` and ``validation``).
    phases: list[PretrainingData] = field(default_factory=list)


def build_run_data(
    data_cfg: DataConfig,
    plan: DataPlan,
    seed: int,
    *,
    tokenizer_file: Path | None = None,
    phase_plans: Sequence[tuple[int, DataPlan]] = (),
) -> RunData:
    """The run's data: the token store prepared (or found) once, the tokenizer, the examples of both splits in the
    plan's layout, and with ``phase_plans`` ((data.max_seq_len, plan) of each phase) every phase's examples. A
    resumed run passes its checkpoint's ``tokenizer_file`` and keeps it (and the store it was tokenized into, where
    that is still there). Every rank calls this: the first to take the store's lock prepares it while the others
    wait on the file system, not in a collective that could time out (``data/store/lock.py``)."""
    units = tagged_sources(plan.units)  # the entity tagger objective.entity_tagger names, built once
    plan = dataclasses.replace(plan, units=units)
    if tokenizer_file is not None and tokenizer_file.is_file():
        data_cfg = resumed_data(data_cfg, tokenizer_file, plan)
    # (data config, plan) of each length to prepare, each alike: every phase's (trainer.phases), else the run's own.
    if phase_plans:
        jobs = [(OmegaConf.merge(data_cfg, {"max_seq_len": n}), _with_units(p, units)) for n, p in phase_plans]
    else:
        jobs = [(data_cfg, plan)]
    prepared = [prepare_pretraining_data(config, job_plan, seed) for config, job_plan in jobs]
    data, phases = prepared[0], prepared if phase_plans else []
    return RunData(data.tokenizer, data.vocab, data.train, data.validation, data.store, data.references, phases)


def _with_units(plan: DataPlan, units: Any) -> DataPlan:
    """A phase's plan reading the units (and the tagger) built once for the run."""
    if plan.units is None or isinstance(plan.units, TaggedSources):
        return plan
    return dataclasses.replace(plan, units=units)


def prepare_pretraining_data(
    data_cfg: DataConfig, layout: Any, seed: int, window: tuple[int, int] | None = None, units: Any = None
) -> PretrainingData:
    """One length's data: the tokenizer and the train and validation examples in ``layout`` (an objective's
    ``DataPlan``, or a layout's name with the (length, stride) ``window`` of a stream layout and the ``units`` of
    ERNIE's knowledge masking), as its layout prepares them (``data/layouts/registry.py``); a blend's sources each
    prepared so, then blended (``data/layouts/blend_sources.py``)."""
    if not isinstance(layout, DataPlan):
        length, stride = window or (None, None)
        layout = DataPlan(choice(layout), window=length, stride=stride, units=units)
    if getattr(data_cfg, "sources", None):  # a weighted blend of corpora, each prepared alone (data/layouts/blend.py)
        return prepare_blended_data(data_cfg, layout, seed)
    return prepare_layout_data(data_cfg, layout, seed)
