"""plm-train: compose -> validate -> build -> run.

plm-train                                    # tiny BERT, MLM + NSP, bundled corpus, CPU-friendly
plm-train model=bert_base objective=mlm optimizer.lr=1e-4 trainer.grad_accum_steps=8
torchrun --nproc_per_node 2 -m plm_toolkit.commands.train hardware=ddp
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from plm_toolkit.commands import run_harness as cli
from plm_toolkit.commands.run_harness import run_command, start_run, write_results
from plm_toolkit.config.resolve import resolve_run, saved_config
from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core import registry
from plm_toolkit.core.errors import PlmError
from plm_toolkit.data.batching.collate import Collator, Seq2SeqCollator
from plm_toolkit.data.build import prepare_pretraining_data
from plm_toolkit.data.layouts.pretraining import store_unit
from plm_toolkit.data.layouts.translation_pairs import prepare_parallel_data
from plm_toolkit.data.sources.bundled import validation_note
from plm_toolkit.data.store.pairs import resumed_parallel_store
from plm_toolkit.data.store.preparation import resumed_store
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.tasks.entity_tagger import with_entity_tagger
from plm_toolkit.training.phases import prepare_phases

log = logging.getLogger("plm_toolkit")


def build_model(model_cfg: DictConfig, vocab_size: int, pad_id: int | None = None, vocab: Vocab | None = None):
    """The backbone from its typed config; ``vocab_size: null`` takes the tokenizer's size, and the padding row is
    the tokenizer's padding id (``pad_id``) where the config has one; with ``vocab``, also its start and end ids
    (``bos_token_id``, ``eos_token_id``) for families that decode."""
    config = OmegaConf.to_object(model_cfg)
    if not hasattr(config, "vocab_size"):  # a family without a token embedding (ELMo reads characters)
        pass
    elif config.vocab_size is None:
        config = dataclasses.replace(config, vocab_size=vocab_size)
    elif config.vocab_size < vocab_size:
        raise PlmError(f"model.vocab_size={config.vocab_size} is smaller than the tokenizer's {vocab_size} tokens")
    ids = {"pad_token_id": pad_id}
    if vocab is not None:
        ids.update(pad_token_id=vocab.pad_id, bos_token_id=vocab.bos_id, eos_token_id=vocab.eos_id)
    config = dataclasses.replace(config, **{k: v for k, v in ids.items() if v is not None and hasattr(config, k)})
    return registry.MODELS.get(config.name).builder(config), config


def prepare_data(cfg: DictConfig, data_cfg: DictConfig, plan, checkpoint: ckpt.Checkpoint | None):
    """The run's tokenizer and examples, with ``trainer.phases``' examples of each phase (or None). A resumed run
    keeps its checkpoint's tokenizer (and the store it was tokenized into, where that is still there)."""
    seed = cfg.trainer.seed
    # The tagger ERNIE's units come from (its weights key their store); phases build theirs in prepare_phases.
    plan = with_entity_tagger(plan)

    def examples(data_cfg):
        if plan.layout == "parallel":
            return prepare_parallel_data(data_cfg, seed), None
        if cfg.trainer.phases:
            phases = prepare_phases(cfg, data_cfg, seed, with_entity_tagger)
            return phases[0].data, phases
        return prepare_pretraining_data(data_cfg, plan, seed), None

    tokenizer_file = checkpoint.path / ckpt.TOKENIZER_FILE if checkpoint is not None else None
    if tokenizer_file is not None and tokenizer_file.is_file() and plan.layout == "parallel":
        data_cfg = resumed_parallel_store(data_cfg, tokenizer_file)
    elif tokenizer_file is not None and tokenizer_file.is_file():
        unit = store_unit(plan.layout, plan.units)
        data_cfg = resumed_store(data_cfg, tokenizer_file, unit, plan.spellings, plan.units)
    # The token store: every rank opens it; the first to take its lock prepares it (and the files a packed layout
    # writes once) while the others wait on the file system, not in a collective that could time out (data/store/lock.py).
    return examples(data_cfg)


def run(cfg: DictConfig, run_dir: Path) -> dict:
    runtime, checkpoint = start_run(cfg, run_dir)
    process = runtime.process

    note = validation_note(cfg.data)
    if note and process.is_main:
        log.info(note)
    resolved = resolve_run(cfg)
    plan = resolved.plan
    data, phases = prepare_data(cfg, resolved.data, plan, checkpoint)
    collate = (
        Seq2SeqCollator(data.vocab.padding_id, data.vocab.require("eos_id", "translation"))
        if plan.layout == "parallel"
        else Collator(data.vocab)
    )

    cli.seed_everything(cfg.trainer.seed)
    model, model_config = build_model(cfg.model, data.vocab.size, vocab=data.vocab)
    objective = registry.OBJECTIVES.get(cfg.objective.name).builder(
        OmegaConf.to_object(cfg.objective), model, data.vocab
    )
    plan = plan.with_transform(objective.batch_transform())
    if plan.layout == "parallel":
        objective.attach_references(data.tokenizer, data.references)
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
    _, final = cli.fit(
        cfg,
        run_dir,
        runtime,
        checkpoint,
        resolved=saved_config(cfg, model_config),
        tokenizer_json=data.tokenizer.to_str(),
        model=model,
        objective=objective,
        train_examples=data.train,
        eval_examples=data.validation,
        collate=collate,
        plan=plan,
        phases=phases,
    )
    if process.is_main:
        log.info("metrics: %s", run_dir / "metrics.jsonl")
        write_results(run_dir, objective)
    return final


@hydra.main(version_base="1.3", config_path="pkg://plm_toolkit.configs", config_name="train")
def hydra_main(cfg: DictConfig) -> float | None:
    return run_command(run, cfg)


def main() -> None:
    cli.main(hydra_main)


if __name__ == "__main__":
    main()
