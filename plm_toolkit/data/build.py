"""A run's data, from one entry point: ``build_run_data`` (plan + data config + seed + the checkpoint's tokenizer ->
the tokenizer, the examples of each split in the objective's layout, each phase's examples), which plm-train and
plm-prepare both call. ``prepare_pretraining_data`` builds one length's examples from the token store."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf
from tokenizers import Tokenizer

from plm_toolkit.core.errors import DataError
from plm_toolkit.data.layouts.blend_sources import prepare_blended_data
from plm_toolkit.data.layouts.examples import PretrainingData
from plm_toolkit.data.layouts.plan import LAYOUT_BUILDERS, DataPlan, Layout
from plm_toolkit.data.layouts.pretraining import build_pretraining_examples, store_unit
from plm_toolkit.data.layouts.translation_pairs import prepare_parallel_data
from plm_toolkit.data.sources.corpus import split_files
from plm_toolkit.data.store.foreign import foreign_split_file, open_foreign_store
from plm_toolkit.data.store.pairs import resumed_parallel_store
from plm_toolkit.data.store.preparation import prepare_store, resumed_store
from plm_toolkit.data.store.token_store import TokenStore
from plm_toolkit.data.tokenization.tokenizer import load_or_train_tokenizer, vocab_from_tokenizer
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
    parallel = plan.layout == Layout.parallel
    if tokenizer_file is not None and tokenizer_file.is_file():
        if parallel:
            data_cfg = resumed_parallel_store(data_cfg, tokenizer_file)
        elif getattr(data_cfg, "sources", None):  # a blend: every source's store with the checkpoint's tokenizer
            data_cfg = OmegaConf.merge(data_cfg, {"tokenizer": {"path": str(tokenizer_file)}})
        else:
            unit = store_unit(plan.layout, plan.units)
            data_cfg = resumed_store(data_cfg, tokenizer_file, unit, plan.spellings, plan.units)
    if parallel:  # sentence pairs for translation, in token-count batches
        pairs = prepare_parallel_data(data_cfg, seed)
        return RunData(pairs.tokenizer, pairs.vocab, pairs.train, pairs.validation, pairs.store, pairs.references)
    phases = [
        prepare_pretraining_data(
            OmegaConf.merge(data_cfg, {"max_seq_len": length}), _with_units(phase_plan, units), seed
        )
        for length, phase_plan in phase_plans
    ]
    data = phases[0] if phases else prepare_pretraining_data(data_cfg, plan, seed)
    return RunData(data.tokenizer, data.vocab, data.train, data.validation, data.store, phases=phases)


def _with_units(plan: DataPlan, units: Any) -> DataPlan:
    """A phase's plan reading the units (and the tagger) built once for the run."""
    if plan.units is None or isinstance(plan.units, TaggedSources):
        return plan
    return dataclasses.replace(plan, units=units)


def prepare_pretraining_data(
    data_cfg: DataConfig, layout: Any, seed: int, window: tuple[int, int] | None = None, units: Any = None
) -> PretrainingData:
    """Tokenizer (loaded or trained), then the train and validation examples in `layout` (a layout name, or an
    objective's ``DataPlan``, which also gives the window, the knowledge units' sources and whether the examples
    carry the spelling of unknown tokens); from the token store (``data/store/token_store.py``).
    ``window`` = (length, stride) of the "streams" layout; ``units``: where knowledge units come from, when the
    objective masks them (``data/units/corpus.py``)."""
    if getattr(data_cfg, "sources", None):  # a weighted blend of corpora, each prepared alone (data/layouts/blend.py)
        return prepare_blended_data(data_cfg, layout, seed, prepare_pretraining_data)
    plan = layout if isinstance(layout, DataPlan) else DataPlan(str(getattr(layout, "value", layout)))
    if isinstance(layout, DataPlan):
        layout, window, units = layout.layout, layout.stream_window, layout.units
    builder = LAYOUT_BUILDERS.get(plan.layout)
    store = None
    if builder is None:  # the store's own tokenizer (a given data.store may hold any); a Megatron-LM or nanoGPT
        # token file is read with data.tokenizer.path
        store = open_foreign_store(data_cfg, plan.layout, units, plan.spellings) or TokenStore(
            prepare_store(data_cfg, store_unit(plan.layout, units), plan.spellings, units)
        )
        tokenizer = store.tokenizer
    else:
        tokenizer = load_or_train_tokenizer(data_cfg)
    vocab = vocab_from_tokenizer(tokenizer)

    def examples(split: str):
        if builder is not None:  # a layout an objective module registered (data/layouts/plan.py)
            return builder(data_cfg, tokenizer, vocab, plan, split, seed)
        return build_pretraining_examples(
            data_cfg, tokenizer, vocab, layout, split, seed, window, units, plan.spellings, store=store
        )

    splits = []
    for split in ("train", "validation"):
        with naming_split(data_cfg, split):
            splits.append(examples(split))
    assert splits[0] is not None  # the training split always has a source, or reading it raised
    return PretrainingData(tokenizer, vocab, *splits, store=store)


@contextmanager
def naming_split(data_cfg: DataConfig, split: str):
    """A DataError about one split's examples that names none of its files ("the corpus has 5 tokens, fewer than one
    window of 33") gets the split's key and files in front: which of the files was too short."""
    try:
        yield
    except DataError as err:
        if getattr(data_cfg, "store", None):  # the store (or token file) the split is read from
            raise _store_named(err, str(data_cfg.store), split) from err
        sources = [str(data_cfg.dataset_path)] if data_cfg.dataset_path else split_files(data_cfg, split)
        if not sources or any(source in str(err) for source in sources):
            raise
        where = f"data.{split}_files=[{', '.join(sources)}]"
        if data_cfg.dataset_path:
            where = f"data.dataset_path={data_cfg.dataset_path} ({split} split)"
        raise DataError(f"{where}: {err}") from err


def _store_named(err: DataError, store: str, split: str) -> DataError:
    """``err`` with the data.store key (and for a foreign token file, the split's file) in front, unless it names
    them already."""
    file = foreign_split_file(store, split)
    where = f"data.store={store}"
    if file is not None and str(file) != store:
        where += f", its {split} file {file}"
    elif file is None:
        where += f" ({split} split)"
    named = str(file) if file is not None else store
    return err if named in str(err) else DataError(f"{where}: {err}")
