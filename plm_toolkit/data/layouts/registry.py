"""Every layout by name, in one registry: how its examples are cut, what the token store holds for it, how one
length's data is prepared (and resumed with a checkpoint's tokenizer), and what validation asks of it. The data entry
point (``data/build.py``), plm-prepare, validation and the objectives' data plans choose by the plan's layout here;
an objective module that brings data of a kind of its own registers it (``register_layout``).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from tokenizers import Tokenizer

from plm_toolkit.core.choices import choice
from plm_toolkit.core.errors import ConfigError, DataError
from plm_toolkit.data.layouts.examples import PretrainingData
from plm_toolkit.data.layouts.plan import DataPlan, Layout
from plm_toolkit.data.layouts.pretraining import (
    Cut,
    full_sentence_blocks,
    open_store,
    segment_pairs,
    sentence_pairs,
    sentence_stream_windows,
    stream_windows,
)
from plm_toolkit.data.layouts.translation_pairs import prepare_parallel_data
from plm_toolkit.data.sources.corpus import SPLITS, split_files
from plm_toolkit.data.store.foreign import foreign_split_file
from plm_toolkit.data.store.preparation import resumed_store
from plm_toolkit.data.store.token_store import TokenStore
from plm_toolkit.data.store.translation_pairs import resumed_parallel_store
from plm_toolkit.data.tokenization.tokenizer import vocab_from_tokenizer
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.data.units.store import log_units


@dataclass(frozen=True)
class LayoutSpec:
    # What an objective that wants this layout reads, for messages.
    words: str
    # A split's examples from the token store (``Cut``), for a layout read from a store this toolkit prepares.
    examples: Callable[[Cut], Any] | None = None
    # What that store holds (data/store/shard_worker.py): running text, with sentence starts, or sentence by sentence.
    unit: str = "sentences"
    # Or one length's whole data, for a layout that prepares its own: prepare(data_cfg, plan, seed).
    prepare: Callable[[Any, DataPlan, int], PretrainingData] | None = None
    # Its data config for a run resumed with a checkpoint's tokenizer file: resume(data_cfg, tokenizer_file).
    resume: Callable[[Any, Path], Any] | None = None
    # Whether plm-prepare writes its token store.
    stored: bool = True
    # Windows of one token stream, cut by the plan's window and stride.
    stream: bool = False
    # Examples that stand alone, so that a blend of corpora (data.sources) may interleave them.
    blends: bool = False
    # Examples that may carry knowledge units (ERNIE's), or the spelling of every unknown token (ELMo's).
    units: bool = False
    spellings: bool = False
    # Whether trainer.phases may change the sequence length within a run.
    phases: bool = True
    # Whether it reads data=parallel's sentence pairs of two languages.
    parallel_text: bool = False


def _parallel(data_cfg: Any, plan: DataPlan, seed: int) -> PretrainingData:
    return prepare_parallel_data(data_cfg, seed)


LAYOUTS: dict[str, LayoutSpec] = {
    Layout.streams: LayoutSpec("streams", stream_windows, "documents", stream=True, blends=True),
    Layout.full_sentences: LayoutSpec(
        "full sentences or pairs", full_sentence_blocks, "document_sentences", blends=True, units=True
    ),
    Layout.sentence_pairs: LayoutSpec("sentence pairs", sentence_pairs, blends=True, units=True),
    Layout.segment_pairs: LayoutSpec("in-order segment pairs", segment_pairs, blends=True, units=True),
    Layout.sentence_streams: LayoutSpec("sentence streams", sentence_stream_windows, stream=True, spellings=True),
    Layout.parallel: LayoutSpec(
        "sentence pairs (data=parallel)",
        prepare=_parallel,
        resume=resumed_parallel_store,
        phases=False,
        parallel_text=True,
    ),
}


def register_layout(name: str, spec: LayoutSpec) -> None:
    """Add a layout an objective module brings (its own ``prepare``, or ``examples`` from the store)."""
    if name in LAYOUTS:
        raise ValueError(f"layout {name!r} exists already")
    LAYOUTS[name] = spec


def layout_of(name: Any) -> LayoutSpec:
    """The layout registered as ``name``; ValueError listing the layouts for another name."""
    spec = LAYOUTS.get(choice(name))
    if spec is None:
        raise ValueError(f"layout must be one of {tuple(LAYOUTS)}, got {choice(name)!r}")
    return spec


def choose_layout(data_cfg: Any, wanted: str, objective: str) -> str:
    """``data.packing`` resolved against the layout an objective wants: ``auto`` takes it; a full-sentences
    objective (MLM) also reads pairs; anything else must be the wanted layout, or ConfigError names the fix."""
    packing = choice(data_cfg.packing)
    if packing == "auto":
        return wanted
    if packing == wanted or (wanted == Layout.full_sentences and not layout_of(packing).stream):
        return packing
    words = LAYOUTS[wanted].words if wanted in LAYOUTS else wanted
    raise ConfigError(f"data.packing={packing}: objective={objective} needs {words}; set data.packing=auto")


def store_unit(plan: DataPlan) -> str:
    """What the token store holds for ``plan``: its layout's unit, or sentences one by one with their join codes
    when the examples carry knowledge units."""
    return "units" if plan.units is not None else layout_of(plan.layout).unit


def resumed_data(data_cfg: Any, tokenizer_file: Path, plan: DataPlan) -> Any:
    """``data_cfg`` for a run resumed with its checkpoint's ``tokenizer_file``: the layout's own resume, else the store
    the run was tokenized into where it still holds that tokenizer (a blend's sources: each store with it)."""
    spec = layout_of(plan.layout)
    if spec.resume is not None:
        return spec.resume(data_cfg, tokenizer_file)
    if getattr(data_cfg, "sources", None) or spec.examples is None:
        return OmegaConf.merge(data_cfg, {"tokenizer": {"path": str(tokenizer_file)}})
    return resumed_store(data_cfg, tokenizer_file, store_unit(plan), plan.spellings, plan.units)


def prepare_layout_data(data_cfg: Any, plan: DataPlan, seed: int) -> PretrainingData:
    """One length's data in the plan's layout: the layout's own preparation, or the token store (prepared or found
    once) with its tokenizer and both splits' examples."""
    spec = layout_of(plan.layout)
    if spec.prepare is not None:
        return spec.prepare(data_cfg, plan, seed)
    store = open_store(data_cfg, plan, store_unit(plan))
    tokenizer, splits = store.tokenizer, []
    vocab = vocab_from_tokenizer(tokenizer)
    for split in SPLITS:
        with naming_split(data_cfg, split):
            splits.append(build_pretraining_examples(data_cfg, tokenizer, vocab, plan, split, seed, store))
    assert splits[0] is not None  # the training split always has a source, or reading it raised
    return PretrainingData(tokenizer, vocab, *splits, store=store)


def build_pretraining_examples(
    data_cfg: Any,
    tokenizer: Tokenizer,
    vocab: Vocab,
    plan: DataPlan | str,
    split: str,
    seed: int,
    store: TokenStore | None = None,
):
    """The examples of ``split`` in the plan's layout (a view over the token store, ``data/layouts/windows.py``), or
    None when the split has no source; deterministic given ``seed``. ``plan``: a data plan or a layout's name; its
    ``units`` (an objective config, ``data/units/corpus.py``) add a ``units`` column, its ``spellings`` the spelling
    of every unknown token. ``store``: the token store when the caller opened it, else prepared (or found) here."""
    plan = plan if isinstance(plan, DataPlan) else DataPlan(choice(plan))
    spec = layout_of(plan.layout)
    max_seq_len = int(data_cfg.max_seq_len)
    if max_seq_len < 8:
        raise DataError(f"data.max_seq_len={max_seq_len} is too short; expected at least 8 tokens")
    if plan.units is not None and not spec.units:
        raise DataError(f"knowledge units travel with full_sentences or sentence-pair packing only, not {plan.layout}")
    if plan.spellings and not spec.spellings:
        raise ValueError(f"token spellings travel with sentence_streams packing only, not {plan.layout}")
    if spec.examples is None:
        raise ValueError(f"layout {plan.layout!r} prepares its own data, not from a token store")
    store = store or open_store(data_cfg, plan, store_unit(plan))
    if store.tokenizer.to_str() != tokenizer.to_str():
        raise DataError(f"the token store {store.folder} holds another tokenizer than the one given")
    part = store.split(split)
    if part is None:
        return None
    if plan.units is not None:
        log_units(split, part.info, plan.units)
    return spec.examples(Cut(data_cfg, store, part, split, seed, plan, tokenizer, vocab))


@contextmanager
def naming_split(data_cfg: Any, split: str):
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
