"""plm-train: compose -> validate -> build -> run.

plm-train                                    # tiny BERT, MLM + NSP, bundled corpus, CPU-friendly
plm-train model=bert_base objective=mlm optimizer.lr=1e-4 trainer.grad_accum_steps=8
torchrun --nproc_per_node 2 -m plm_toolkit.train hardware=ddp
"""

from __future__ import annotations

import dataclasses
import logging
import random
from pathlib import Path

import hydra
import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from plm_toolkit import registry
from plm_toolkit.catalog import load_all
from plm_toolkit.cli import run_command, start_run
from plm_toolkit.config import register_schemas
from plm_toolkit.config.validate import data_plan, tokenizer_kind
from plm_toolkit.data import prepare_pretraining_data
from plm_toolkit.data.collate import Collator
from plm_toolkit.data.corpus import register_resolvers
from plm_toolkit.errors import PlmError
from plm_toolkit.training import checkpoint as ckpt
from plm_toolkit.training.distributed import barrier
from plm_toolkit.training.loop import Trainer

log = logging.getLogger("plm_toolkit")

register_schemas()
load_all()
register_resolvers()


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def build_model(model_cfg: DictConfig, vocab_size: int, pad_id: int | None = None):
    """The backbone from its typed config; ``vocab_size: null`` takes the tokenizer's size, and the padding row is
    the tokenizer's padding id (``pad_id``) where the config has one."""
    config = OmegaConf.to_object(model_cfg)
    if config.vocab_size is None:
        config = dataclasses.replace(config, vocab_size=vocab_size)
    elif config.vocab_size < vocab_size:
        raise PlmError(f"model.vocab_size={config.vocab_size} is smaller than the tokenizer's {vocab_size} tokens")
    if pad_id is not None and hasattr(config, "pad_token_id"):
        config = dataclasses.replace(config, pad_token_id=pad_id)
    return registry.MODELS.get(config.name).builder(config), config


def run(cfg: DictConfig, run_dir: Path) -> dict:
    runtime, checkpoint = start_run(cfg, run_dir)
    process = runtime.process

    data_cfg = OmegaConf.merge(cfg.data, {"tokenizer": {"kind": tokenizer_kind(cfg)}})
    if checkpoint is not None and (checkpoint.path / ckpt.TOKENIZER_FILE).is_file():
        data_cfg = OmegaConf.merge(data_cfg, {"tokenizer": {"path": str(checkpoint.path / ckpt.TOKENIZER_FILE)}})
    # Rank 0 trains the tokenizer and tokenizes first; the others then read its cache.
    if not process.is_main:
        barrier(process)
    plan = data_plan(cfg)
    data = prepare_pretraining_data(data_cfg, plan, cfg.trainer.seed)
    if process.is_main:
        barrier(process)

    seed_everything(cfg.trainer.seed)
    model, model_config = build_model(cfg.model, data.vocab.size, data.vocab.pad_id)
    objective = registry.OBJECTIVES.get(cfg.objective.name).builder(
        OmegaConf.to_object(cfg.objective), model, data.vocab
    )
    plan = plan.with_transform(objective.batch_transform())
    resolved = OmegaConf.to_container(cfg, resolve=True)
    resolved["model"]["vocab_size"] = model_config.vocab_size
    if "pad_token_id" in resolved["model"]:
        resolved["model"]["pad_token_id"] = model_config.pad_token_id
    resolved["data"]["tokenizer"]["kind"] = tokenizer_kind(cfg)
    log.info(
        "model=%s (%.2fM parameters) objective=%s device=%s precision=%s processes=%d train examples=%d",
        cfg.model.name,
        model.num_parameters() / 1e6,
        cfg.objective.name,
        runtime.device,
        runtime.precision,
        process.world_size,
        len(data.train),
    )
    trainer = Trainer(
        model=model,
        objective=objective,
        train_examples=data.train,
        eval_examples=data.validation,
        collate=Collator(data.vocab),
        runtime=runtime,
        trainer_cfg=cfg.trainer,
        optimizer_cfg=cfg.optimizer,
        hardware_cfg=cfg.hardware,
        run_dir=run_dir,
        config_yaml=OmegaConf.to_yaml(OmegaConf.create(resolved)),
        tokenizer_json=data.tokenizer.to_str(),
        num_workers=cfg.data.num_workers,
        plan=plan,
    )
    if checkpoint is not None:
        trainer.restore(checkpoint)
    final = trainer.fit()
    if process.is_main:
        log.info("run directory: %s", run_dir)
        log.info("metrics: %s", run_dir / "metrics.jsonl")
        log.info("checkpoint: %s", trainer.last_checkpoint)
    return final


@hydra.main(version_base="1.3", config_path="pkg://plm_toolkit.configs", config_name="train")
def main(cfg: DictConfig) -> float | None:
    return run_command(run, cfg)


if __name__ == "__main__":
    main()
