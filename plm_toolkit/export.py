"""plm-export: write a plm-train (or plm-finetune) checkpoint as a Hugging Face folder.

    plm-export runs/gpt2 out/gpt2-hf              # a run directory, checkpoints/last or a step_N folder
    plm-export runs/bert/checkpoints/step_300 out/bert --backbone-only

The folder holds config.json, model.safetensors and the tokenizer (tokenizer.json; a byte-level BPE also as
vocab.json + merges.txt), in the layout of the family's transformers class: the pretraining heads of the run's
objective where transformers has them (BertForPreTraining, GPT2LMHeadModel, ...; ELECTRA's generator in
``generator/``), the bare model otherwise. What the weights do not show (ELECTRA's generator head count, XLNet's
reuse_len) comes from the checkpoint's config.yaml; an export that could not load exactly is refused. A fine-tuned
checkpoint exports its backbone. Families transformers does not have (Transformer-XL) are refused with the list of
those it has.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from plm_toolkit import failures, registry
from plm_toolkit.errors import CheckpointError
from plm_toolkit.models.hf import export_hf
from plm_toolkit.models.pretrained import (
    load_plm_checkpoint,
    plm_checkpoint_dir,
    read_config_yaml,
    typed_objective_config,
)
from plm_toolkit.training import checkpoint as ckpt

log = logging.getLogger("plm_toolkit")


def export_checkpoint(source: str | Path, out: str | Path, backbone_only: bool = False) -> Path:
    """Export the checkpoint ``source`` names into the folder ``out``; returns the step folder it read."""
    source = Path(source).expanduser()
    step = plm_checkpoint_dir(source) if source.exists() else None
    if step is None:
        raise CheckpointError(
            f"{source}: no plm-train checkpoint here (a run directory, checkpoints/last or a step_N folder holding "
            f"{ckpt.MODEL_FILE} and {ckpt.CONFIG_FILE})"
        )
    model, tokenizer_file = load_plm_checkpoint(step)
    saved = read_config_yaml(step / ckpt.CONFIG_FILE)
    objective_state, objective_config = {}, None
    section = saved.get("objective")
    if not backbone_only and "task" not in saved and section is not None and section.get("name") in registry.OBJECTIVES:
        objective_config = typed_objective_config(section.name, section)
        if (step / ckpt.OBJECTIVE_FILE).is_file():
            objective_state = ckpt.read_weights(step / ckpt.OBJECTIVE_FILE)
    try:
        export_hf(out, model, objective_state, tokenizer_file, objective_config)
    except CheckpointError as err:
        if not objective_state:
            raise
        raise CheckpointError(f"{err} (--backbone-only exports the model without the objective's heads)") from err
    return step


def main(argv: list[str] | None = None) -> int:
    parser = failures.ArgumentParser(prog="plm-export", description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", help="a plm-train run directory, checkpoints/last or a step_N folder")
    parser.add_argument("out_dir", help="the Hugging Face folder to write (created if needed)")
    parser.add_argument(
        "--backbone-only", action="store_true", help="leave the objective's heads out (the bare model class)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    failures.task_started()  # no run directory: an OSError names its own path
    try:
        step = export_checkpoint(args.checkpoint, args.out_dir, args.backbone_only)
    except Exception as err:
        if not failures.report(err):
            raise
        return 1
    log.info("exported %s to %s", step, args.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
