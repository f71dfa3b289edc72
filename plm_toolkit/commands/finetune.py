"""plm-finetune: compose -> validate -> load the backbone -> read the task's data -> run the loop.

plm-finetune model.checkpoint=runs/demo-TIME/pretrain/checkpoints/last data.train_file=train.tsv   # task=sst2
plm-finetune task=squad2 model.checkpoint=/models/minilm data.train_file=train-v2.0.json \
    data.validation_file=dev-v2.0.json data.max_seq_len=384
plm-finetune task=ner model.checkpoint=PATH data.train_file=train.conll data.validation_file=dev.conll
plm-finetune task=sst2 model.checkpoint=/models/bert-sst2 trainer.epochs=0 data.validation_file=dev.tsv  # evaluate

The task plays the objective's part in plm-train's loop (training/loop.py), so precision, accumulation,
checkpoints and resume are the same. The run directory gets eval_results.json and the task's prediction files. A
fine-tuned checkpoint's task head (a Hugging Face folder's, or a plm-finetune run's with the rest of its task module)
starts the task's head where it computes the same thing (tasks/checkpoint_head.py); ``trainer.epochs=0`` evaluates
without training.
"""

from __future__ import annotations

import logging
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from plm_toolkit.commands import run_harness
from plm_toolkit.commands.fitting import in_run_directory, run_training, seed_everything, start_run
from plm_toolkit.commands.run_harness import run_command, write_results
from plm_toolkit.config.lengths import steps_over_epochs
from plm_toolkit.config.resolve import saved_finetune_config, task_class
from plm_toolkit.data.tokenization.tokenizer import vocab_from_tokenizer
from plm_toolkit.interop.finetuned_head import HEAD_SECTION
from plm_toolkit.interop.pretrained import load_backbone
from plm_toolkit.tasks.base import character_width
from plm_toolkit.tasks.checkpoint_head import checkpoint_labels, head_record, start_from_checkpoint_head
from plm_toolkit.tasks.dispatch import task_for_backbone

log = logging.getLogger("plm_toolkit")


def run(cfg: DictConfig, run_dir: Path) -> dict:
    runtime, checkpoint, _ = start_run(cfg, run_dir)
    process = runtime.process

    seed_everything(cfg.trainer.seed)
    loaded = load_backbone(cfg.model.checkpoint, cfg.model.dropout, with_task_head=True)
    model, tokenizer = loaded.model, loaded.tokenizer
    vocab = vocab_from_tokenizer(tokenizer, source=loaded.source)
    # optimizer.d_model=0 (the preset) stands for the backbone's width; a derived copy, cfg stays as validated.
    optimizer_cfg = cfg.optimizer
    if not cfg.optimizer.d_model:
        optimizer_cfg = OmegaConf.merge(cfg.optimizer, {"d_model": int(model.config.hidden_size)})

    longest = type(model).max_length(model.config)
    if longest is not None and cfg.data.max_seq_len > longest:
        # Longer inputs would not fit the position table: they are cut to it, as data.max_seq_len cuts any input.
        log.warning(
            "data.max_seq_len=%d exceeds the %d positions of the backbone in %s: inputs are cut to %d tokens",
            cfg.data.max_seq_len,
            longest,
            cfg.model.checkpoint,
            longest,
        )
        cfg = OmegaConf.merge(cfg, {"data": {"max_seq_len": longest}})  # a copy: the validated config stays as given
    cls = task_for_backbone(task_class(cfg.task.name), model, cfg.task.name)
    task_config = OmegaConf.to_object(cfg.task)
    if not cfg.data.train_file and getattr(task_config, "labels", None) == [] and not cfg.task.get("regression"):
        # An evaluation without a training file: the labels the checkpoint's head names, in its order.
        task_config.labels = checkpoint_labels(cls, cfg.task.name, loaded.task_head)
    data = cls.prepare_data(task_config, cfg.data, tokenizer, vocab, characters=character_width(model))
    if hasattr(task_config, "labels") and data.labels:
        task_config.labels = list(data.labels)
    task = cls(task_config, model, vocab, data, finetune=OmegaConf.to_object(cfg.finetune))
    start_from_checkpoint_head(task, model, loaded.task_head, loaded.initialized_keys)

    resolved = saved_finetune_config(cfg, optimizer_cfg, task_config, model.config)
    # What the head's weights do not show (its dense layer's activation), for plm-export.
    resolved[HEAD_SECTION] = head_record(task)
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
    _, final = run_training(
        cfg,
        run_dir,
        runtime,
        checkpoint,
        resolved=resolved,
        tokenizer_json=tokenizer.to_str(),
        optimizer_cfg=optimizer_cfg,
        model=model,
        objective=task,
        train_examples=data.train,
        eval_examples=data.validation,
        collate=task.collator(),
    )
    if process.is_main:
        write_results(run_dir, task)
    return final


@hydra.main(version_base="1.3", config_path="pkg://plm_toolkit.configs", config_name="finetune")
def hydra_main(cfg: DictConfig) -> float | None:
    # trainer.max_steps=N alone on the command line counts the run in steps, as transformers' Trainer does.
    note = steps_over_epochs(cfg, HydraConfig.get().overrides.task)
    if note:
        log.info(note)
    return run_command(in_run_directory(run), cfg)


def main() -> None:
    run_harness.main(hydra_main)


if __name__ == "__main__":
    main()
