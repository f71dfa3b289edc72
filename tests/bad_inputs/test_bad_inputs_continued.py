# ruff: noqa: E501  (the table of bad inputs reads best one case a line, as in test_bad_inputs.py)
"""Continued pretraining's bad inputs through the real command line (``plm-train model.checkpoint=PATH``): a folder
of no known format, a family the objective cannot serve, a tokenizer larger than the weights' vocabulary, a preset
or an architecture or tokenizer override that contradicts the checkpoint, a pickled pytorch_model.bin that would
run code (refused unread). One line each on stderr, exit status 1, the checkpoint folder untouched."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core.weights import read_weights
from tests.bad_inputs.test_bad_inputs import Case, RunsCode, check_outcome
from tests.conftest import tree_digest
from tests.training import released
from tests.training.conftest import QUIET

transformers = pytest.importorskip("transformers")

BASE = ("data=text_files", "data.train_files=[{corpus}]", "data.cache_dir={cache}", "data.max_seq_len=32", *QUIET)
HF = "model.checkpoint={prepared}/hf"

CASES = [
    Case("continued_no_known_format", "train", ("model.checkpoint={prepared}/notes",), "model.checkpoint={prepared}/notes: not a plm-train checkpoint (model.safetensors + config.yaml), a Hugging Face folder (config.json) or", untouched="{prepared}/notes"),
    Case("continued_objective_cannot_serve", "train", (HF, "objective=clm"), "objective=clm needs a model that is causal; model=bert is not", untouched="{prepared}/hf"),
    Case("continued_tokenizer_larger", "train", ("model.checkpoint={prepared}/big_tokenizer",), "{prepared}/big_tokenizer/tokenizer.json: 351 tokens, but the model's word embeddings have 301 rows", untouched="{prepared}/big_tokenizer"),
    Case("continued_architecture_override", "train", (HF, "model.hidden_size=64"), "model.hidden_size=64 contradicts model.checkpoint={prepared}/hf, whose hidden_size is 36: the checkpoint sets the architecture", untouched="{prepared}/hf"),
    Case("continued_vocab_size_override", "train", (HF, "model.vocab_size=999"), "model.vocab_size=999 contradicts model.checkpoint={prepared}/hf, whose vocab_size is 301", untouched="{prepared}/hf"),
    Case("continued_preset_of_another_family", "train", (HF, "model=gpt2_tiny"), "model=gpt2_tiny contradicts model.checkpoint={prepared}/hf, a bert checkpoint: the checkpoint sets the model; leave model= out", untouched="{prepared}/hf"),
    Case("continued_preset_of_other_sizes", "train", (HF, "model=bert_base"), "model=bert_base sets model.hidden_size=768, but model.checkpoint={prepared}/hf has 36", untouched="{prepared}/hf"),
    Case("continued_tokenizer_override", "train", (HF, "data.tokenizer.path={prepared}/big_tokenizer/tokenizer.json"), "data.tokenizer.path contradicts model.checkpoint={prepared}/hf: the checkpoint's tokenizer is used as it is", untouched="{prepared}/hf"),
    Case("continued_tokenizer_size_override", "train", (HF, "data.tokenizer.vocab_size=500"), "data.tokenizer.vocab_size contradicts model.checkpoint={prepared}/hf", untouched="{prepared}/hf"),
    Case("continued_pickle_code", "train", ("model.checkpoint={prepared}/hf_code",), "{prepared}/hf_code/pytorch_model.bin: refused: besides tensors this pickle holds posix.system, and unpickling it could run code", untouched="{prepared}/hf_code"),
]  # fmt: skip


def prepare(prepared: Path) -> None:
    """A BertForPreTraining release (wordpiece of 301 pieces) and copies broken one way each."""
    hf = released.bert(transformers, prepared / "hf")
    (prepared / "notes").mkdir()
    (prepared / "notes" / "README.txt").write_text("weights elsewhere\n")
    shutil.copytree(hf, prepared / "big_tokenizer")
    tokenizer = json.loads((hf / ckpt.TOKENIZER_FILE).read_text())
    vocab = tokenizer["model"]["vocab"]
    vocab |= {f"extra{i}": len(vocab) + i for i in range(50)}
    (prepared / "big_tokenizer" / ckpt.TOKENIZER_FILE).write_text(json.dumps(tokenizer))
    shutil.copytree(hf, prepared / "hf_code")
    state = read_weights(hf / "model.safetensors")
    (prepared / "hf_code" / "model.safetensors").unlink()
    torch.save({**state, "hook": RunsCode()}, prepared / "hf_code" / "pytorch_model.bin")


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("bad_inputs_continued")
    prepare(root / "prepared")
    corpus = root / "corpus.txt"
    corpus.write_text("A first sentence of the corpus. And a second one.\n\nAnother document here.\n")
    env = {**os.environ, "TQDM_DISABLE": "1"}
    env.pop("HYDRA_FULL_ERROR", None)

    def one(case: Case) -> tuple[str, dict]:
        tmp = root / "cases" / case.name
        tmp.mkdir(parents=True)
        places = {"tmp": str(tmp), "run": str(tmp / "run"), "prepared": str(root / "prepared")}
        places |= {"corpus": str(corpus), "cache": str(root / "cache")}
        kept = Path(case.untouched.format(**places))
        before = tree_digest(kept)
        args = [*BASE, "hydra.run.dir={run}", *case.overrides]
        command = [sys.executable, "-m", "plm_toolkit.commands.train", *(a.format(**places) for a in args)]
        done = subprocess.run(command, cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
        left = sorted(p.name for p in tmp.iterdir() if p.name != "run")
        return case.name, {"done": done, "places": places, "before": before, "after": tree_digest(kept), "left": left}

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, CASES))


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_continued_pretraining_bad_input_gets_one_line(case, outcomes):
    check_outcome(case, outcomes[case.name])
    assert "unpickled" not in outcomes[case.name]["done"].stderr  # the pickle's code never ran
