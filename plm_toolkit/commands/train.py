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

from plm_toolkit.commands import run_harness
from plm_toolkit.commands.fitting import in_run_directory, run_training, seed_everything, start_run
from plm_toolkit.commands.run_harness import run_command, write_results
from plm_toolkit.config.resolve import saved_config
from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core import registry
from plm_toolkit.core.errors import PlmError
from plm_toolkit.data.build import build_run_data
from plm_toolkit.data.sources.bundled import validation_note
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.training.continued import adopt_checkpoint, load_starting_weights

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


def run(cfg: DictConfig, run_dir: Path, overrides: list[str] | None = None) -> dict:
    # model.checkpoint: the checkpoint's model, tokenizer and objective, before validation sees the config.
    start = adopt_checkpoint(cfg, run_dir, overrides)
    runtime, checkpoint, resolved = start_run(cfg, run_dir)
    process = runtime.process
    note = validation_note(cfg.data)
    if note and process.is_main:
        log.info(note)
    plan = resolved.plan
    # A resumed run keeps its checkpoint's tokenizer (and the store it was tokenized into, where that is still there).
    tokenizer_file = checkpoint.path / ckpt.TOKENIZER_FILE if checkpoint is not None else None
    data = build_run_data(
        resolved.data, plan, cfg.trainer.seed, tokenizer_file=tokenizer_file, phase_plans=resolved.phase_plans
    )

    seed_everything(cfg.trainer.seed)
    model, model_config = build_model(cfg.model, data.vocab.size, vocab=data.vocab)
    objective = registry.OBJECTIVES.get(cfg.objective.name).builder(
        OmegaConf.to_object(cfg.objective), model, data.vocab
    )
    if start is not None and checkpoint is None:  # a resumed run restores its own checkpoint instead
        load_starting_weights(start, model, objective, cfg.objective.name)
    plan = plan.with_transform(objective.batch_transform())
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
    _, final = run_training(
        cfg,
        run_dir,
        runtime,
        checkpoint,
        resolved=saved_config(cfg, model_config, resolved.data),
        tokenizer_json=data.tokenizer.to_str(),
        model=model,
        objective=objective,
        train_examples=data.train,
        eval_examples=data.validation,
        collate=objective.collator(data.vocab),
        plan=plan,
        phase_data=data.phases,
    )
    if process.is_main:
        log.info("metrics: %s", run_dir / "metrics.jsonl")
        write_results(run_dir, objective)
    return final


@hydra.main(version_base="1.3", config_path="pkg://plm_toolkit.configs", config_name="train")
def hydra_main(cfg: DictConfig) -> float | None:
    return run_command(in_run_directory(run), cfg)


def main() -> None:
    run_harness.main(hydra_main)


if __name__ == "__main__":
    main()
