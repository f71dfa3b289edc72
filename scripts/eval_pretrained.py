"""Evaluate pretraining checkpoints on their run's validation data and print one JSON line per checkpoint.

For an MLM-style objective: accuracy at the masked positions. For ``rtd``: the discriminator's accuracy over all
real tokens, on the replaced ones (recall) and on the original ones, and the generator's MLM accuracy. Used for the
ELECTRA-tiny vs BERT-tiny comparison:

    .venv/bin/python scripts/eval_pretrained.py runs/bert/checkpoints/last runs/electra/checkpoints/last
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from omegaconf import OmegaConf

from plm_toolkit.config import setup
from plm_toolkit.config.resolve import resolve_run
from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core import registry
from plm_toolkit.core.weights import load_weights
from plm_toolkit.data.batching.collate import Collator
from plm_toolkit.data.batching.loader import eval_loader
from plm_toolkit.data.build import prepare_pretraining_data
from plm_toolkit.objectives.masking import IGNORE_INDEX
from plm_toolkit.objectives.rtd import flat_targets, gumbel_sample, rtd_labels


def load(checkpoint: Path):
    cfg = OmegaConf.load(checkpoint / ckpt.CONFIG_FILE)
    data_cfg = OmegaConf.merge(cfg.data, {"tokenizer": {"path": str(checkpoint / ckpt.TOKENIZER_FILE)}})
    data = prepare_pretraining_data(data_cfg, resolve_run(cfg).plan, cfg.trainer.seed)
    model_entry, objective_entry = registry.MODELS.get(cfg.model.name), registry.OBJECTIVES.get(cfg.objective.name)
    model = model_entry.builder(model_entry.config_cls(**OmegaConf.to_container(cfg.model)))
    objective = objective_entry.builder(
        objective_entry.config_cls(**OmegaConf.to_container(cfg.objective)), model, data.vocab
    )
    load_weights(model, checkpoint / ckpt.MODEL_FILE)
    load_weights(objective, checkpoint / ckpt.OBJECTIVE_FILE)
    return cfg, data, model.eval(), objective.eval()


@torch.no_grad()
def evaluate(checkpoint: Path) -> dict:
    cfg, data, model, objective = load(checkpoint)
    sums: dict[str, float] = {}

    def add(key: str, value) -> None:
        sums[key] = sums.get(key, 0.0) + float(value)

    batches = eval_loader(
        data.validation, 32, 1, 0, Collator(data.vocab), objective.batch_transform(), cfg.trainer.seed, 0
    )
    for batch in batches:
        labels = batch["mlm_labels"]
        targets = labels != IGNORE_INDEX
        if cfg.objective.name == "rtd":
            logits = objective.generator_logits(model, batch)
            positions = flat_targets(labels, batch)
            gold = torch.nn.functional.pad(labels.flatten(), (0, 1), value=IGNORE_INDEX)[positions]
            add("mlm_correct", ((logits.argmax(-1) == gold) & (gold != IGNORE_INDEX)).sum())
            sampled = gumbel_sample(logits, torch.Generator().manual_seed(0))
            corrupted, replaced = rtd_labels(batch["input_ids"], labels, sampled, positions, batch["attention_mask"])
            hidden = model(corrupted, batch["attention_mask"], batch.get("token_type_ids")).hidden
            predicted = objective.discriminator_head(hidden) > 0
            real = batch["attention_mask"].bool()
            add("tokens", real.sum())
            add("rtd_correct", (predicted == replaced)[real].sum())
            add("replaced", replaced.sum())
            add("replaced_detected", (predicted & replaced).sum())
            add("original", (real & ~replaced).sum())
            add("original_kept", (~predicted & real & ~replaced).sum())
        else:
            out = objective(model, batch)
            add("mlm_correct", out.metrics["mlm_correct"])
        add("targets", targets.sum())
    result = {
        "checkpoint": str(checkpoint.resolve()),
        "model": cfg.model.name,
        "objective": cfg.objective.name,
        "step": ckpt.Checkpoint(checkpoint).step(),
        "parameters_backbone": model.num_parameters(),
        "mlm_accuracy": sums["mlm_correct"] / sums["targets"],
    }
    if cfg.objective.name == "rtd":
        result.update(
            rtd_accuracy=sums["rtd_correct"] / sums["tokens"],
            replaced_share=sums["replaced"] / sums["tokens"],
            replaced_token_accuracy=sums["replaced_detected"] / max(sums["replaced"], 1.0),
            original_token_accuracy=sums["original_kept"] / sums["original"],
        )
    return result


def main() -> None:
    setup()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoints", nargs="+", type=Path)
    for checkpoint in parser.parse_args().checkpoints:
        print(json.dumps(evaluate(checkpoint)))


if __name__ == "__main__":
    main()
