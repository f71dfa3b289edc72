"""Checks of ``data.sources`` (a weighted blend of corpora, data/layouts/blend.py) before any data or model work."""

from __future__ import annotations

import math
import os
import re
from types import SimpleNamespace

from plm_toolkit.data.layouts.registry import LAYOUTS
from plm_toolkit.data.sources.pieces import listed_files, source_problems

_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def blend_problems(cfg, plan) -> list[str]:
    """One message per problem of ``data.sources`` (none when it is empty); ``plan``: the run's data plan, or None
    where it could not be derived."""
    d, sources = cfg.data, cfg.data.get("sources") or []
    if not sources:
        return []
    out: list[str] = []
    for key, own in (("train_files", "files"), ("validation_files", "validation_files")):
        if d.get(key):
            out.append(
                f"data.sources and data.{key} are both set: a blend reads data.sources[i].{own}; give data=text_files "
                f"or data.{key}=[]"
            )
    for key in ("dataset_path", "store"):
        if d.get(key):
            out.append(
                f"data.sources and data.{key} are both set: a blend prepares one store per source; unset data.{key}"
            )
    if d.get("prepare_parts", 1) > 1:
        out.append(
            "data.sources and data.prepare_parts are both set: a blend prepares one store per source on one node"
        )
    if "source_lang" in d:
        out.append("data.sources blends monolingual corpora; data=parallel is not one of them")
    out += _layout_problems(cfg, plan)
    out += _source_problems(sources)
    return out


def _layout_problems(cfg, plan) -> list[str]:
    if plan is None:
        return []
    objective = f"objective={cfg.objective.name}"
    if plan.layout not in LAYOUTS or not LAYOUTS[plan.layout].blends:
        blended = ", ".join(name for name, spec in LAYOUTS.items() if spec.blends)
        return [f"data.sources: {objective} reads {plan.layout} examples, which a blend does not interleave; blends "
                f"serve {blended}"]  # fmt: skip
    if plan.streams:
        return [f"data.sources: {objective} reads one contiguous stream per batch row (a carried memory), which a "
                "blend of sources would cut at every example; train it on data.train_files"]  # fmt: skip
    if plan.units is not None:
        return [
            f"data.sources: {objective} masks knowledge units, which a blend does not carry; train on data.train_files"
        ]
    if cfg.trainer.get("group_by_length"):
        return ["data.sources and trainer.group_by_length are both set: a blend reads in its sources' proportions, not "
                "by length; set trainer.group_by_length=false"]  # fmt: skip
    return []


def _source_problems(sources) -> list[str]:
    out: list[str] = []
    seen: dict[str, int] = {}
    weights = []
    for number, source in enumerate(sources):
        key = f"data.sources[{number}]"
        name = str(source.name or "")
        if not name:
            out.append(f"{key}.name is empty: give every source a name (name: wiki), used in its metrics' keys")
        elif not _NAME.fullmatch(name):
            out.append(f"{key}.name={name!r}: expected letters, digits, '_', '.' or '-' (it names metrics' keys)")
        elif name in seen:
            out.append(f"{key}.name={name}: data.sources[{seen[name]}] has that name too; every source needs its own")
        else:
            seen[name] = number
        weight = float(source.weight)
        if not math.isfinite(weight) or weight < 0:
            out.append(f"{key}.weight={source.weight}: expected a number of 0 or more (a share of the examples)")
        weights.append(weight)
        if not source.files:
            out.append(f"{key}.files is empty: give the source's files or patterns (files: [wiki/*.txt])")
        files = SimpleNamespace(train_files=list(source.files), validation_files=list(source.validation_files))
        for problem in source_problems(files):
            problem = problem.replace("data.train_files", f"{key}.files")
            out.append(problem.replace("data.validation_files", f"{key}.validation_files"))
    return out + _twice_problems(sources) + _weight_problems(weights)


# What a file listed twice would be, by the list it is in.
TWICE = {"files": "trained twice", "validation_files": "counted twice in eval_loss"}


def _twice_problems(sources) -> list[str]:
    """A file that two entries name, in one source or in two: each listing is read, so it would count twice without
    a word (a file listed twice in data.train_files is refused alike)."""
    out: list[str] = []
    for field, outcome in TWICE.items():
        owners: dict[str, tuple[str, str]] = {}
        for number, source in enumerate(sources):
            key = f"data.sources[{number}].{field}"
            for path, entry in listed_files(source[field], key):
                real = os.path.realpath(path)
                if real not in owners:
                    owners[real] = (key, entry)
                    continue
                first_key, first = owners[real]
                if first_key == key:
                    out.append(
                        f"{key}: {path} is listed twice (by {first!r} and {entry!r}), so it would be {outcome}; list "
                        "each file once (to weight a file, raise its source's weight)"
                    )
                else:
                    out.append(
                        f"{key}: {path} is in {first_key} too (by {first!r}; here by {entry!r}), so it would be "
                        f"{outcome}; list it in one source (to weight it, raise that source's weight)"
                    )
    return out


def _weight_problems(weights: list[float]) -> list[str]:
    out: list[str] = []
    if weights and all(math.isfinite(w) and w >= 0 for w in weights):
        total = sum(weights)
        if total == 0:
            out.append("data.sources: every weight is 0; give at least one source a positive weight")
        elif not math.isfinite(total):  # each weight finite, their sum past the largest float: every share would be 0
            out.append(
                f"data.sources: the weights ({', '.join(f'{w:g}' for w in weights)}) add up to more than the largest "
                "number a float holds (1.8e308); they are shares of the examples: give the same ratios in smaller "
                "numbers (0.7 and 0.3, or 7 and 3)"
            )
    return out
