"""plm-finetune: compose -> validate -> load the backbone -> read the task's data -> run the loop.

plm-finetune model.checkpoint=runs/demo/checkpoints/last                      # SST-2 (task=sst2 is the default)
plm-finetune task=squad2 model.checkpoint=/models/minilm data.train_file=train-v2.0.json \
    data.validation_file=dev-v2.0.json data.max_seq_len=384
plm-finetune task=ner model.checkpoint=PATH data.train_file=train.conll data.validation_file=dev.conll

The task plays the objective's part in plm-train's loop (training/loop.py), so precision, accumulation,
checkpoints and resume are the same. The run directory gets eval_results.json and the task's prediction files.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from plm_toolkit.catalog import load_all
from plm_toolkit.cli import run_command, start_run
from plm_toolkit.config import register_schemas
from plm_toolkit.config.validate import task_class
from plm_toolkit.data.corpus import register_resolvers
from plm_toolkit.data.tokenizer import vocab_from_tokenizer
from plm_toolkit.models.pretrained import load_backbone
from plm_toolkit.train import seed_everything
from plm_toolkit.training.loop import Trainer

log = logging.getLogger("plm_toolkit")

register_schemas()
load_all()
register_resolvers()

EVAL_RESULTS = "eval_results.json"


def write_json(path: Path, value) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n")
    tmp.replace(path)


def run(cfg: DictConfig, run_dir: Path) -> dict:
    runtime, checkpoint = start_run(cfg, run_dir)
    process = runtime.process

    seed_everything(cfg.trainer.seed)
    loaded = load_backbone(cfg.model.checkpoint, cfg.model.dropout)
    model, tokenizer = loaded.model, loaded.tokenizer
    vocab = vocab_from_tokenizer(tokenizer, source=loaded.source)
    cfg.optimizer.d_model = int(model.config.hidden_size)

    cls = task_class(cfg.task.name)
    task_config = OmegaConf.to_object(cfg.task)
    data = cls.prepare_data(task_config, cfg.data, tokenizer, vocab)
    if hasattr(task_config, "labels") and data.labels:
        task_config.labels = list(data.labels)
    task = cls(task_config, model, vocab, data)

    resolved = OmegaConf.to_container(cfg, resolve=True)
    resolved["task"] = OmegaConf.to_container(OmegaConf.structured(task_config), resolve=True)
    # The backbone's architecture travels with the fine-tuned checkpoint, so it loads without the original.
    resolved["backbone"] = OmegaConf.to_container(OmegaConf.structured(model.config), resolve=True)
    log.info(
        "task=%s backbone=%s from %s (%.2fM parameters) device=%s precision=%s train features=%d eval features=%s",
        cfg.task.name,
        model.config.name,
        loaded.source,
        model.num_parameters() / 1e6,
        runtime.device,
        runtime.precision,
        len(data.train),
        "none" if data.validation is None else len(data.validation),
    )
    trainer = Trainer(
        model=model,
        objective=task,
        train_examples=data.train,
        eval_examples=data.validation,
        collate=task.collator(),
        runtime=runtime,
        trainer_cfg=cfg.trainer,
        optimizer_cfg=cfg.optimizer,
        hardware_cfg=cfg.hardware,
        run_dir=run_dir,
        config_yaml=OmegaConf.to_yaml(OmegaConf.create(resolved)),
        tokenizer_json=tokenizer.to_str(),
        num_workers=cfg.data.num_workers,
    )
    if checkpoint is not None:
        trainer.restore(checkpoint)
    final = trainer.fit()
    if process.is_main:
        log.info("run directory: %s", run_dir)
        log.info("checkpoint: %s", trainer.last_checkpoint)
        if task.last_metrics:
            for name, value in task.artifacts.items():
                write_json(run_dir / name, value)
            write_json(run_dir / EVAL_RESULTS, task.last_metrics)
            log.info("eval results: %s %s", run_dir / EVAL_RESULTS, json.dumps(task.last_metrics))
    return final


@hydra.main(version_base="1.3", config_path="pkg://plm_toolkit.configs", config_name="finetune")
def main(cfg: DictConfig) -> float | None:
    return run_command(run, cfg)


if __name__ == "__main__":
    main()
