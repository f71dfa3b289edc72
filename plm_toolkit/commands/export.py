"""plm-export: write a plm-train (or plm-finetune) checkpoint as a Hugging Face folder, or an ELMo as bilm-tf's; or
a token store as Megatron-LM's or nanoGPT's token files.

    plm-export runs/gpt2 out/gpt2-hf              # a run directory, checkpoints/last or a step_N folder
    plm-export runs/bert/checkpoints/step_300 out/bert --backbone-only
    plm-export runs/elmo out/elmo --format bilm-tf
    plm-export runs/sst2 out/sst2                 # plm-finetune: BertForSequenceClassification with SST-2's labels
    plm-export stores/wiki out/wiki-megatron --format megatron   # a token store as Megatron-LM's train.bin/.idx

The Hugging Face folder holds config.json, model.safetensors and the tokenizer (tokenizer.json; a byte-level BPE also
as vocab.json + merges.txt), in the layout of the family's transformers class: the pretraining heads of the run's
objective where transformers has them (BertForPreTraining, GPT2LMHeadModel, ...; ELECTRA's generator in
``generator/``), the bare model otherwise. What the weights do not show (ELECTRA's generator head count, XLNet's
reuse_len) comes from the checkpoint's config.yaml; an export that could not load exactly is refused. Families
transformers does not have (Transformer-XL) are refused with the list of those it has. ``--format bilm-tf`` writes an
ELMo as bilm-tf's options.json + weights.hdf5 (+ vocab.txt), what plm-embed, allennlp and bilm-tf read.

Beside tokenizer.json, tokenizer_config.json and config.json's special-token ids let transformers' AutoTokenizer and
the Auto model give the run's ids, padding and generation (``interop/hf_tokenizer.py``, docs/interop-tokenizers.md).

A fine-tuned checkpoint exports as the transformers task class whose head computes what the task's does
(...ForSequenceClassification, ...ForTokenClassification, ...ForQuestionAnswering: ``tasks/checkpoint_head.py`` reads
the head, ``interop/hf_heads.py`` runs the family's import layouts backwards), with the task's labels as config.json's
id2label and its problem_type, so that transformers' AutoModelFor... and ``plm-finetune model.checkpoint=OUT_DIR``
load it to the same scores. A head no transformers class computes (ELECTRA's linear head over [CLS], GPT's with a
bias, one over finetune.mode=features' task encoder) is refused in one line; ``--backbone-only`` writes the bare
backbone of any checkpoint. A text-to-text task has no head: its encoder-decoder is the whole model and exports as such.

The folder is written whole or not at all (``atomic.atomic_folder``): into a temporary folder beside OUT_DIR, renamed
into place once every file is on disk. OUT_DIR may be absent, empty or an earlier export (``exported.json`` lists
the files plm-export wrote; that export is replaced); a folder holding anything else is refused, so that nothing
plm-export did not write is ever deleted.

``--format megatron`` / ``--format nanogpt`` take a token store (plm-prepare's folder) instead of a checkpoint and
write OUT_DIR/train.bin + train.idx (+ validation.*), or OUT_DIR/train.bin + val.bin (``data/store/export.py``), with
the store's tokenizer beside them: tokenizer.json, plus megatron-core's tokenizer files or nanoGPT's meta.json (what
its meta.pkl holds, as JSON) (``interop/token_file_tokenizers.py``).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from contextlib import contextmanager, nullcontext
from pathlib import Path

from plm_toolkit.commands import failures
from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core import registry
from plm_toolkit.core.atomic import atomic_folder
from plm_toolkit.core.catalog import load_all
from plm_toolkit.core.errors import CheckpointError, ConfigError
from plm_toolkit.core.weights import read_weights
from plm_toolkit.data.store.export import STORE_FORMATS, write_token_files
from plm_toolkit.data.tokenization.tokenizer import load_tokenizer, vocab_from_tokenizer
from plm_toolkit.interop.checkpoint_reader import (
    load_plm_checkpoint,
    model_config_of,
    read_config_yaml,
    typed_objective_config,
)
from plm_toolkit.interop.elmo_bilm_tf import export_bilm_tf
from plm_toolkit.interop.hf import ADAPTERS, export_hf, some
from plm_toolkit.interop.hf_heads import TaskHead
from plm_toolkit.interop.token_file_tokenizers import write_token_file_tokenizer
from plm_toolkit.tasks.checkpoint_head import finetuned_head

log = logging.getLogger("plm_toolkit")

FORMATS = ("hf", "bilm-tf", *STORE_FORMATS)
# The formats besides Hugging Face's, and the families each holds.
FAMILY_FORMATS = {"bilm-tf": ("elmo",)}
# Written last into every export: its checkpoint, format and files, so that a later export knows what it may replace.
MANIFEST_FILE = "exported.json"


def files_under(folder: Path) -> list[str]:
    """Every file and folder under ``folder``, relative to it."""
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


def earlier_export(out: Path) -> set[str]:
    """What an earlier plm-export wrote into ``out`` (with the folders holding it), by its manifest; empty without."""
    try:
        files = json.loads((out / MANIFEST_FILE).read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return set()
    if not isinstance(files, list) or not all(isinstance(name, str) for name in files):
        return set()
    folders = {str(parent) for name in files for parent in Path(name).parents if str(parent) != "."}
    return {MANIFEST_FILE, *files, *folders}


def check_out_dir(out: Path) -> None:
    """Refuse an ``out`` that cannot become a folder, or that holds anything plm-export did not write there (replacing
    the folder would delete it)."""
    existing = next((path for path in (out, *out.parents) if path.exists()), None)
    if existing is not None and existing != out and not existing.is_dir():
        raise CheckpointError(f"{out}: cannot be created: {existing} is a file, not a folder")
    if existing != out:
        return
    if not out.is_dir():
        raise CheckpointError(f"{out}: exists and is not a folder; give a new or empty folder")
    foreign = sorted(set(files_under(out)) - earlier_export(out))
    if foreign:
        raise CheckpointError(
            f"{out}: holds files plm-export did not write ({some(foreign)}); give a new or empty folder (plm-export "
            f"replaces only an earlier export, listed in its {MANIFEST_FILE})"
        )


def check_family(fmt: str, config) -> None:
    """Refuse a format that cannot hold the checkpoint's family before its weights are read."""
    holders = FAMILY_FORMATS.get(fmt)
    if holders is not None and config.name not in holders:
        raise CheckpointError(
            f"--format {fmt} holds model={'/'.join(holders)} only; this checkpoint is model={config.name}: "
            "export it with --format hf"
        )
    if fmt == "hf":
        load_all()
        try:
            ADAPTERS.for_config(config)
        except CheckpointError as err:
            others = [name for name, families in FAMILY_FORMATS.items() if config.name in families]
            if not others:
                raise
            raise CheckpointError(f"{err}; --format {others[0]} writes model={config.name}") from None


@contextmanager
def leaving_out(what: str):
    """A CheckpointError inside says that --backbone-only leaves ``what`` out."""
    try:
        yield
    except CheckpointError as err:
        raise CheckpointError(f"{err} (--backbone-only exports the model without {what})") from err


def write_hf(folder: Path, step: Path, model, tokenizer_file: Path, saved, head: TaskHead | None) -> None:
    """The Hugging Face folder of ``model``: the task class of a fine-tuned ``head``, else with the heads of the
    run's objective (``saved``: its config.yaml; None for the backbone alone)."""
    if head is not None:
        with leaving_out("the task's head"):
            export_hf(folder, model, tokenizer_file=tokenizer_file, task_head=head)
        return
    objective_state, objective_config = {}, None
    section = saved.get("objective") if saved is not None and "task" not in saved else None
    if section is not None and section.get("name") in registry.OBJECTIVES:
        objective_config = typed_objective_config(section.name, section)
        if (step / ckpt.OBJECTIVE_FILE).is_file():
            objective_state = read_weights(step / ckpt.OBJECTIVE_FILE)
    with leaving_out("the objective's heads") if objective_state else nullcontext():
        export_hf(folder, model, objective_state, tokenizer_file, objective_config)


def export_checkpoint(
    source: str | Path, out: str | Path, backbone_only: bool = False, format: str = "hf", eod: bool = True
) -> Path:
    """Export the checkpoint ``source`` names into the folder ``out``, atomically; returns the step folder it read.
    ``--format megatron`` / ``nanogpt``: ``source`` is a token store (``export_token_store``)."""
    if format not in FORMATS:
        raise ConfigError(f"--format {format}: expected one of {', '.join(FORMATS)}")
    source = Path(source).expanduser()
    if format in STORE_FORMATS:
        return export_token_store(source, out, format, eod)
    step = ckpt.plm_checkpoint_dir(source) if source.exists() else None
    if step is None:
        raise CheckpointError(
            f"{source}: no plm-train checkpoint here (a run directory, checkpoints/last or a step_N folder holding "
            f"{ckpt.MODEL_FILE} and {ckpt.CONFIG_FILE})"
        )
    out = Path(os.path.abspath(Path(out).expanduser()))
    if out.is_symlink():  # replace the folder it points to, not the link
        out = out.resolve()
    ckpt.refuse_inside_checkpoints(out)
    check_out_dir(out)
    check_family(format, model_config_of(step))
    model, tokenizer_file = load_plm_checkpoint(step)
    saved = None if backbone_only else read_config_yaml(step / ckpt.CONFIG_FILE)
    with leaving_out("the task's head"):
        vocab = None if saved is None else vocab_from_tokenizer(load_tokenizer(tokenizer_file))
        head = None if saved is None else finetuned_head(step, saved, model, vocab)
        if head is not None and format == "bilm-tf":
            raise CheckpointError(
                f"{head.source}: bilm-tf's folder holds the biLM alone, not {head.architecture}'s head"
            )
    with atomic_folder(out) as tmp:
        if format == "bilm-tf":
            export_bilm_tf(tmp, model, load_tokenizer(tokenizer_file))
        else:
            write_hf(tmp, step, model, tokenizer_file, saved, head)
        manifest = {"checkpoint": str(step), "format": format, "files": files_under(tmp)}
        (tmp / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return step


def export_token_store(source: Path, out: str | Path, format: str, eod: bool = True) -> Path:
    """The token store at ``source`` as Megatron-LM's or nanoGPT's token files in the folder ``out``, atomically
    (``data/store/export.py``); ``eod``: Megatron's sequences get the document separator after each document."""
    out = Path(os.path.abspath(Path(out).expanduser()))
    check_out_dir(out)
    with atomic_folder(out) as tmp:
        counts = write_token_files(source, tmp, format, eod)
        tokenizer = write_token_file_tokenizer(source, tmp, format)  # the ids' meaning and count beside them
        manifest = {"store": str(source), "format": format, "splits": counts, **tokenizer, "files": files_under(tmp)}
        (tmp / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return source


def _stop(signum, frame):
    raise SystemExit(128 + signum)  # unwinds through atomic_folder, which removes its temporary folder


def main(argv: list[str] | None = None) -> int:
    parser = failures.ArgumentParser(prog="plm-export", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "checkpoint",
        help="a plm-train run directory, checkpoints/last or a step_N folder; a token store (plm-prepare's folder) "
        "for --format megatron or nanogpt",
    )
    parser.add_argument(
        "out_dir", help="the folder to write: absent, empty or an earlier export (replaced whole, atomically)"
    )
    parser.add_argument(
        "--backbone-only",
        action="store_true",
        help="leave the objective's or the task's heads out (the bare model class)",
    )
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default="hf",
        help="hf: a Hugging Face folder (default); bilm-tf: an ELMo as options.json + weights.hdf5 (+ vocab.txt); "
        "megatron: a token store as Megatron-LM's train.bin/.idx (+ validation.bin/.idx); nanogpt: a token store as "
        "nanoGPT's train.bin and val.bin",
    )
    parser.add_argument(
        "--no-eod",
        action="store_true",
        help="--format megatron: no end-of-document token after each document (Megatron's BERT data; GPT needs it)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    failures.task_started()  # no run directory: an OSError names its own path
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        step = export_checkpoint(args.checkpoint, args.out_dir, args.backbone_only, args.format, not args.no_eod)
    except Exception as err:
        if not failures.report(err):
            raise
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
    log.info("exported %s to %s", step, args.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
