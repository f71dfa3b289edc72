"""The examples of a blend (``data.sources``, ``data/layouts/blend.py``): one tokenizer for all sources, each source
prepared into its own token store and cut into the run's layout, then blended."""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from tokenizers import Tokenizer

from plm_toolkit.core.atomic import write_text
from plm_toolkit.core.cache import cache_root, stable_hash
from plm_toolkit.core.errors import DataError
from plm_toolkit.data.layouts.blend import BlendedExamples, SourceValidation
from plm_toolkit.data.layouts.examples import PretrainingData
from plm_toolkit.data.layouts.plan import DataPlan
from plm_toolkit.data.layouts.registry import prepare_layout_data
from plm_toolkit.data.sources.corpus import document_boundary
from plm_toolkit.data.sources.pieces import resolve_sources
from plm_toolkit.data.sources.sampling import sample_texts
from plm_toolkit.data.tokenization.tokenizer import load_tokenizer, train_cached

log = logging.getLogger("plm_toolkit")


def prepare_blended_data(data_cfg: Any, plan: DataPlan, seed: int) -> PretrainingData:
    """The tokenizer and the blended train examples of ``data.sources`` (``plan``: the objective's data plan), with
    the validation examples of every source that has some, together and by source; each source's examples as the
    plan's layout prepares them (``data/layouts/registry.py``)."""
    sources = list(data_cfg.sources)
    tokenizer_file = blend_tokenizer(data_cfg)
    parts: dict[str, PretrainingData] = {}
    for number, source in enumerate(sources):
        with naming_source(number):
            parts[source.name] = prepare_layout_data(source_config(data_cfg, source, tokenizer_file), plan, seed)
    first = next(iter(parts.values()))
    names = list(parts)
    train = BlendedExamples(names, [p.train for p in parts.values()], [float(s.weight) for s in sources])
    held = [(name, p.validation) for name, p in parts.items() if p.validation is not None and len(p.validation)]
    validation = SourceValidation([n for n, _ in held], [v for _, v in held]) if held else None
    log.info("data.sources: %s", train.describe())
    return PretrainingData(first.tokenizer, first.vocab, train, validation)


def blend_summary(data: PretrainingData) -> dict[str, dict]:
    """Each source's weight and examples (plm-prepare's summary of a blend)."""
    held = getattr(data.validation, "sources", None) or {}
    return {
        name: {"weight": float(weight), "train": len(view), "validation": len(held.get(name, ()))}
        for name, view, weight in zip(data.train.names, data.train.views, data.train.weights, strict=True)
    }


def source_config(data_cfg: Any, source: Any, tokenizer_file: Path | None = None) -> Any:
    """The data config of one source: its files as train_files and validation_files, its own text_column and
    document_boundary where it gives them, the blend's tokenizer."""
    own = {key: source.get(key) for key in ("text_column", "document_boundary") if source.get(key) is not None}
    return OmegaConf.merge(
        data_cfg,
        {
            "train_files": [str(f) for f in source.files],
            "validation_files": [str(f) for f in source.validation_files],
            "sources": [],
            **({"tokenizer": {"path": str(tokenizer_file)}} if tokenizer_file is not None else {}),
            **own,
        },
    )


def blend_tokenizer(data_cfg: Any) -> Path:
    """The file of the blend's tokenizer under the cache, named by its contents: data.tokenizer.path's, else one
    trained on a sample of every source's training files (each read with its own text_column and
    document_boundary; the sample's share of each source is its share of the bytes). A resumed run (whose
    data.tokenizer.path is its checkpoint's tokenizer) finds the same file, so its sources' stores are the ones it
    trained on."""
    t = data_cfg.tokenizer
    if t.path:
        tokenizer = load_tokenizer(t.path, lowercase=t.lowercase is None or bool(t.lowercase))
        return _saved(tokenizer, cache_root(data_cfg) / "tokenizers")
    configs = [source_config(data_cfg, source) for source in data_cfg.sources]
    read = [(resolve_sources(c, "train"), document_boundary(c), str(c.text_column)) for c in configs]
    total = max(sum(s.size for sources, _, _ in read for s in sources), 1)
    budget = int(t.train_sample_bytes)
    shares = [max(budget * sum(s.size for s in sources) // total, 1) for sources, _, _ in read]
    records = [([s.record() for s in sources], boundary, column) for sources, boundary, column in read]
    fingerprint = stable_hash("blend", records, shares)

    def texts():
        for (sources, boundary, column), share in zip(read, shares, strict=True):
            yield from sample_texts(sources, share, boundary, column)

    named = ", ".join(s.path for sources, _, _ in read for s in sources)
    tokenizer = train_cached(data_cfg, fingerprint, texts, source=named, sample=(budget, total))
    return _saved(tokenizer, cache_root(data_cfg) / "tokenizers")


def _saved(tokenizer: Tokenizer, folder: Path) -> Path:
    """``tokenizer`` written under ``folder`` as the sources' stores will read it (a GPT-2 vocabulary gains its
    template on loading), named by those contents: the same file for the checkpoint's copy of it."""
    folder.mkdir(parents=True, exist_ok=True)
    scratch = folder / f".blend.{os.getpid()}.tmp.json"
    try:
        scratch.write_text(tokenizer.to_str(), encoding="utf-8")
        text = load_tokenizer(scratch).to_str()
    finally:
        scratch.unlink(missing_ok=True)
    path = folder / f"blend-{stable_hash(text)}.json"
    if not (path.is_file() and path.read_text(encoding="utf-8") == text):
        write_text(path, text)
    return path


@contextmanager
def naming_source(number: int):
    """A DataError about one source's files names them by their data.sources key."""
    try:
        yield
    except DataError as err:
        text = str(err).replace("data.train_files", f"data.sources[{number}].files")
        raise DataError(text.replace("data.validation_files", f"data.sources[{number}].validation_files")) from err
