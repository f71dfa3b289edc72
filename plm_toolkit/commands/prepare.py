"""plm-prepare: tokenize a corpus once into a token store (docs/data-store.md) that plm-train reads.

plm-prepare model=gpt2 'data.train_files=[corpus/*.jsonl.gz]' data.store=/data/gpt2-store data.num_proc=32
plm-train model=gpt2 data.store=/data/gpt2-store        # every rank of every node reads the same store
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import hydra
from omegaconf import DictConfig

from plm_toolkit.commands import run_harness
from plm_toolkit.commands.run_harness import run_command
from plm_toolkit.config.validate import validate
from plm_toolkit.core.errors import ConfigError
from plm_toolkit.data.build import build_run_data
from plm_toolkit.data.layouts.blend_sources import blend_summary
from plm_toolkit.data.layouts.registry import layout_of, store_unit
from plm_toolkit.data.store.parts import prepare_part
from plm_toolkit.data.store.repair import repairing_damaged_stores

log = logging.getLogger("plm_toolkit")


def run(cfg: DictConfig, run_dir: Path) -> dict:
    """Prepare (or resume, or find finished, or repair) the store of ``cfg``, and the files the run's layout writes
    once (full-sentence blocks, sentence pairs for trainer.seed), so that plm-train starts at once; prints a summary
    as JSON on stdout."""
    with repairing_damaged_stores():  # a store that no longer checks out is mended, not refused (data/store/repair.py)
        return _prepare(cfg)


def _prepare(cfg: DictConfig) -> dict:
    resolved = validate(cfg)
    plan = resolved.plan
    if not layout_of(plan.layout).stored:  # a layout that prepares its data without a token store
        raise ConfigError(
            f"plm-prepare writes token stores; objective={cfg.objective.name}'s data is prepared by plm-train"
        )
    data_cfg = resolved.data
    if data_cfg.get("sources"):  # a blend: one store per source, each prepared once (data/layouts/blend_sources.py)
        data = build_run_data(data_cfg, plan, int(cfg.trainer.seed))
        print(json.dumps({"sources": blend_summary(data), "examples": {"layout": plan.layout}}), flush=True)
        return {}
    if data_cfg.get("prepare_parts", 1) > 1:  # one job of several across nodes (data/store/parts.py)
        unit, part, parts = store_unit(plan), data_cfg.prepare_part, data_cfg.prepare_parts
        folder, finished = prepare_part(data_cfg, unit, plan.spellings, plan.units, part, parts)
        if not finished:  # the part that finishes last writes the manifest and the layout's files
            print(json.dumps({"store": str(folder), "part": part, "parts": parts, "finished": False}), flush=True)
            return {}
    # The files the run's layout writes once (full-sentence blocks, sentence pairs for trainer.seed) are written now
    # too, so that plm-train starts at once; a Megatron-LM or nanoGPT token file is checked and surveyed, not prepared.
    data = build_run_data(data_cfg, plan, int(cfg.trainer.seed))
    store = data.store
    manifest = store.manifest
    summary = {
        "store": str(getattr(store, "path", store.folder)),  # a foreign token file: its own path
        "unit": manifest["settings"]["unit"],
        "vocab_size": manifest["vocab_size"],
        "splits": {
            name: {key: info[key] for key in ("bytes", "tokens", "documents", "sentences", "shards") if key in info}
            for name, info in manifest["splits"].items()
        },
        "prepared": manifest.get("prepared", {}),
        "examples": {"layout": plan.layout, "train": len(data.train), "validation": len(data.validation or ())},
    }
    print(json.dumps(summary), flush=True)
    return {}


@hydra.main(version_base="1.3", config_path="pkg://plm_toolkit.configs", config_name="prepare")
def hydra_main(cfg: DictConfig) -> float | None:
    return run_command(run, cfg)


def main() -> None:
    run_harness.main(hydra_main)


if __name__ == "__main__":
    main()
