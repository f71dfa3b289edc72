"""Every bad input through the real command line: exit status 1, exactly one line on stderr that starts with
``error:`` and names the file or key, no traceback anywhere, and a last checkpoint left as it was.

To add a case (every new reader should): put its input file in ``files/`` (or build it in ``prepared`` when it
cannot be a static file) and add a row to CASES: the command, its overrides and a fragment of the expected line.
Placeholders in both: ``{files}`` (this folder's files/), ``{tmp}`` (the case's own directory), ``{checkpoint}``
(a plm-train checkpoint), ``{prepared}`` (the folders ``prepared`` builds) and ``{run}`` (the case's run directory).
A case with ``resume=True`` runs in a copy of a finished plm-train run, whose checkpoints must come out untouched.

The cases run as subprocesses, several at a time, once per session; each test then reads its own outcome.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_module

from plm_toolkit.data.corpus import resource_path
from plm_toolkit.models.hf import export_hf
from plm_toolkit.train import run as train_run
from plm_toolkit.training import checkpoint as ckpt
from tests.training.conftest import TINY

FILES = Path(__file__).parent / "files"


@dataclass(frozen=True)
class Case:
    name: str
    # "train" (plm-train) or "finetune" (plm-finetune).
    command: str
    overrides: tuple[str, ...]
    # A fragment of the one error line, after placeholders are filled in.
    expected: str
    # Run in a copy of a finished run (checkpoints/ present) with trainer.resume=auto.
    resume: bool = False


SQUAD = ("task=squad2", "data.max_seq_len=48", "task.doc_stride=16", "task.max_query_length=8")

CASES = [
    # --- config keys and values ---------------------------------------------------------------------------------
    Case("unknown_key_added", "train", ("+trainer.max_step=5",), "trainer.max_step: unknown key; did you mean trainer.max_steps?"),
    Case("misspelt_key", "train", ("trainer.max_step=5",), "trainer.max_step: unknown key; did you mean trainer.max_steps?"),
    Case("misspelt_group", "train", ("modle=bert_base",), "modle: unknown key; did you mean model?"),
    Case("unknown_option", "train", ("model=bert_huge",), "model=bert_huge: no such option in the config group 'model'; did you mean bert_large?"),
    Case("not_a_group", "finetune", ("model=bert_base",), "model: not a config group of this command; set its keys as model.<key>=<value>"),
    Case("unknown_task", "finetune", ("task=squad3",), "task=squad3: no such option in the config group 'task'; did you mean squad2?"),
    Case("wrong_type", "train", ("trainer.max_steps=abc",), "trainer.max_steps=abc: Value 'abc' of type 'str' could not be converted to Integer"),
    Case("bad_choice", "train", ("hardware.device=tpu",), "hardware.device=tpu: Invalid value 'tpu', expected one of [auto, cpu, cuda]"),
    Case("lr_nan", "train", ("optimizer.lr=nan",), "optimizer.lr=nan: expected a finite number in (0, inf)"),
    Case("lr_negative", "finetune", ("optimizer.lr=-1",), "optimizer.lr=-1.0: expected a finite number in (0, inf)"),
    Case("warmup_inf", "train", ("optimizer.warmup_ratio=inf",), "optimizer.warmup_ratio=inf: expected a finite number in [0, 1)"),
    Case("steps_and_epochs", "finetune", ("trainer.max_steps=10",), "trainer.max_steps=10 and trainer.epochs=3.0: give exactly one length"),
    Case("run_dir_not_writable", "train", ("hydra.run.dir={files}/blank_corpus.txt/run",), "hydra.run.dir: cannot create or write the run directory ({files}/blank_corpus.txt"),
    # --- pretraining corpora and checkpoints ---------------------------------------------------------------------
    Case("corpus_nul_byte", "train", ("data.train_files=[{files}/binary_corpus.txt]",), "{files}/binary_corpus.txt:2: NUL byte"),
    Case("corpus_not_utf8", "train", ("data.train_files=[{files}/latin1_corpus.txt]",), "{files}/latin1_corpus.txt:1: not valid UTF-8"),
    Case("corpus_blank", "train", ("data.train_files=[{files}/blank_corpus.txt]",), "corpus file {files}/blank_corpus.txt has no text"),
    Case("resume_missing", "train", ("trainer.resume={tmp}/nowhere",), "trainer.resume={tmp}/nowhere: no checkpoint there"),
    Case("resume_other_shape", "train", ("model.hidden_size=48",), "model.safetensors: incompatible shapes", resume=True),
    Case("resume_nan_lr", "train", ("optimizer.lr=nan",), "optimizer.lr=nan", resume=True),
    # --- fine-tuning data --------------------------------------------------------------------------------------
    Case("squad_no_usable_example", "finetune", (*SQUAD, "data.train_file={files}/squad_answer_start.json"), "no usable training examples in {files}/squad_answer_start.json (1 skipped: answer_start does not match the answer text"),
    Case("squad_impossible_false", "finetune", (*SQUAD, "data.train_file={files}/squad_impossible_false.json"), "data[0].paragraphs[0].qas[1] (id=q-contradiction): is_impossible is false but there are no answers"),
    Case("squad_malformed", "finetune", (*SQUAD, "data.train_file={files}/squad_malformed.json"), "{files}/squad_malformed.json:3:"),
    Case("tsv_extra_fields", "finetune", ("data.train_file={files}/extra_fields.tsv",), "{files}/extra_fields.tsv:3: 3 fields, more than the header's 2"),
    Case("train_file_missing", "finetune", ("data.train_file={tmp}/train.tsv",), "data.train_file: {tmp}/train.tsv is not a file"),
    # --- backbones for fine-tuning ---------------------------------------------------------------------------------
    Case("checkpoint_missing", "finetune", ("model.checkpoint={tmp}/none",), "model.checkpoint={tmp}/none: no such file or directory"),
    Case("checkpoint_yaml", "finetune", ("model.checkpoint={prepared}/bad_yaml",), "{prepared}/bad_yaml/config.yaml:2:13: not valid YAML"),
    Case("hf_pickle", "finetune", ("model.checkpoint={prepared}/hf_pickle",), "{prepared}/hf_pickle/pytorch_model.bin: refused: besides tensors this pickle holds argparse.Namespace, and unpickling it could run code"),
    Case("hf_config_heads", "finetune", ("model.checkpoint={prepared}/hf_heads",), "{prepared}/hf_heads/config.json: inconsistent config"),
]  # fmt: skip


def command_line(case: Case, places: dict[str, str]) -> list[str]:
    module = {"train": "plm_toolkit.train", "finetune": "plm_toolkit.finetune"}[case.command]
    if case.command == "train":
        base = [*TINY, "data=text_files", "data.train_files=[{corpus}]", "data.cache_dir={cache}"]
    else:
        sst2 = [resource_path("corpora/sst2/train.tsv"), resource_path("corpora/sst2/dev.tsv")]
        base = ["model.checkpoint={checkpoint}", f"data.train_file={sst2[0]}", f"data.validation_file={sst2[1]}"]
        base += ["data.max_seq_len=48", "trainer.progress_bar=false", "trainer.tensorboard=false", "hardware=cpu"]
    args = [*base, "hydra.run.dir={run}", *case.overrides]
    return [sys.executable, "-m", module, *(a.format(**places) for a in args)]


def tree_digest(root: Path) -> dict[str, str]:
    """Each file's sha256 and each link's target under ``root``."""
    out = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        if path.is_symlink():
            out[key] = "-> " + os.readlink(path)
        elif path.is_file():
            out[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@pytest.fixture(scope="session")
def pretrained_run(tmp_path_factory) -> dict[str, Path]:
    """A finished 2-step plm-train run (its checkpoint is the backbone of the fine-tuning cases), and the folders
    of the cases that cannot be static files."""
    root = tmp_path_factory.mktemp("bad_inputs")
    docs = Path(resource_path("corpora/wikitext2/train.txt")).read_text().split("\n\n")
    corpus = root / "corpus.txt"
    corpus.write_text("\n\n".join(docs[:6])[:20000])
    overrides = [*TINY, "data=text_files", f"data.train_files=[{corpus}]", f"data.cache_dir={root / 'cache'}"]
    with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
        cfg = compose("train", overrides=[*overrides, "trainer.max_steps=2"])
    train_run(cfg, root / "run")
    checkpoint = root / "run" / "checkpoints" / "step_2"

    prepared = root / "prepared"
    shutil.copytree(checkpoint, prepared / "bad_yaml")
    (prepared / "bad_yaml" / ckpt.CONFIG_FILE).write_text("model:\n  name: bert: large\n")
    from plm_toolkit.models.pretrained import load_backbone

    backbone = load_backbone(checkpoint).model
    export_hf(
        prepared / "hf_heads",
        backbone,
        ckpt.read_weights(checkpoint / ckpt.OBJECTIVE_FILE),
        checkpoint / "tokenizer.json",
    )
    hf_config = json.loads((prepared / "hf_heads" / "config.json").read_text())
    (prepared / "hf_heads" / "config.json").write_text(json.dumps({**hf_config, "num_attention_heads": 5}))
    shutil.copytree(prepared / "hf_heads", prepared / "hf_pickle")
    (prepared / "hf_pickle" / "config.json").write_text(json.dumps(hf_config))
    (prepared / "hf_pickle" / "model.safetensors").unlink()
    import argparse

    state = {k: v.clone() for k, v in ckpt.read_weights(prepared / "hf_heads" / "model.safetensors").items()}
    torch.save({**state, "args": argparse.Namespace(lr=1e-4)}, prepared / "hf_pickle" / "pytorch_model.bin")
    return {"root": root, "corpus": corpus, "checkpoint": checkpoint, "prepared": prepared, "run": root / "run"}


@pytest.fixture(scope="session")
def outcomes(pretrained_run) -> dict[str, dict]:
    """Every case run once, two at a time: name -> returncode, stdout, stderr, places and checkpoint digests."""
    env = {**os.environ, "HF_DATASETS_DISABLE_PROGRESS_BARS": "1", "TQDM_DISABLE": "1"}
    env.pop("HYDRA_FULL_ERROR", None)

    def one(case: Case) -> tuple[str, dict]:
        tmp = pretrained_run["root"] / "cases" / case.name
        tmp.mkdir(parents=True)
        run_dir = tmp / "run"
        if case.resume:
            shutil.copytree(pretrained_run["run"], run_dir, symlinks=True)
        places = {
            "files": str(FILES),
            "tmp": str(tmp),
            "run": str(run_dir),
            "checkpoint": str(pretrained_run["checkpoint"]),
            "prepared": str(pretrained_run["prepared"]),
            "corpus": str(pretrained_run["corpus"]),
            "cache": str(pretrained_run["root"] / "cache"),
        }
        before = tree_digest(run_dir / "checkpoints") if case.resume else None
        done = subprocess.run(command_line(case, places), cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
        after = tree_digest(run_dir / "checkpoints") if case.resume else None
        return case.name, {"done": done, "places": places, "before": before, "after": after}

    with ThreadPoolExecutor(max_workers=max(2, min(4, os.cpu_count() or 2))) as pool:
        return dict(pool.map(one, CASES))


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_gets_one_line_and_loses_nothing(case, outcomes):
    outcome = outcomes[case.name]
    done = outcome["done"]
    output = f"stdout:\n{done.stdout[-2000:]}\nstderr:\n{done.stderr[-3000:]}"
    assert done.returncode == 1, output
    assert "Traceback" not in done.stdout + done.stderr, output
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), output
    assert case.expected.format(**outcome["places"]) in lines[0], output
    if case.resume:
        assert outcome["after"] == outcome["before"] and outcome["before"], "the checkpoints changed"
