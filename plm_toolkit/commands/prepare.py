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

from plm_toolkit.commands import run_harness as cli
from plm_toolkit.commands.run_harness import run_command
from plm_toolkit.config.resolve import resolve_run
from plm_toolkit.config.validate import validate
from plm_toolkit.core.errors import ConfigError
from plm_toolkit.data.build import prepare_pretraining_data
from plm_toolkit.data.layouts.pretraining import store_unit
from plm_toolkit.data.layouts.translation_pairs import prepare_parallel_data
from plm_toolkit.data.store.foreign import foreign_kind, open_foreign_store
from plm_toolkit.data.store.pairs import prepare_parallel_store
from plm_toolkit.data.store.preparation import prepare_store
from plm_toolkit.data.store.token_store import TokenStore
from plm_toolkit.tasks.entity_tagger import with_entity_tagger

log = logging.getLogger("plm_toolkit")


def run(cfg: DictConfig, run_dir: Path) -> dict:
    """Prepare (or resume, or find finished) the store of ``cfg``; prints a summary as JSON on stdout."""
    validate(cfg)
    resolved = resolve_run(cfg)
    # ERNIE's units need the entity tagger its objective names (built here, as plm-train builds it).
    plan = with_entity_tagger(resolved.plan)
    if plan.layout not in ("streams", "full_sentences", "sentence_pairs", "segment_pairs", "sentence_streams",
                           "parallel"):  # fmt: skip
        raise ConfigError(
            f"plm-prepare writes token stores; objective={cfg.objective.name}'s data is prepared by plm-train"
        )
    data_cfg = resolved.data
    seed = int(cfg.trainer.seed)
    if plan.layout == "parallel":  # sentence pairs for translation (their batches are checked, and made at start)
        store = TokenStore(prepare_parallel_store(data_cfg))
        data = prepare_parallel_data(data_cfg, seed)
    elif foreign_kind(data_cfg.get("store")) is not None:  # token ids already: checked and surveyed, not prepared
        store = open_foreign_store(data_cfg, plan.layout, plan.units, plan.spellings)
        data = prepare_pretraining_data(data_cfg, plan, seed)
    else:
        store = TokenStore(prepare_store(data_cfg, store_unit(plan.layout, plan.units), plan.spellings, plan.units))
        # The files the run's layout writes once (full-sentence blocks, sentence pairs for trainer.seed) are
        # written now too, so that plm-train starts at once.
        data = prepare_pretraining_data(data_cfg, plan, seed)
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
    return run_command(run, cfg, writes_run_directory=False)


def main() -> None:
    cli.main(hydra_main)


if __name__ == "__main__":
    main()
