"""A tokenizer that does not belong to its weights, the other direction from test_bad_inputs_round3.py's: a tiny
GPT-2 checkpoint (its own tokenizer GPT-2's byte-level BPE, ``A <|endoftext|>``) whose tokenizer.json was replaced
by a BERT WordPiece of the same size (``[CLS] A [SEP]``), and a Hugging Face export of it likewise. plm-finetune,
plm-export, plm-generate and plm-embed each exit 1 with one ``error:`` line naming the tokenizer.json, the template
it has and the one GPT-2 expects (test_bad_inputs.py's ``assert_one_error_line``); the checkpoint with its own
tokenizer still generates.

The cases share one 2-step run of the tiny GPT-2 and run two at a time, once per session.
"""

# The table of cases reads best one case a line, as in test_bad_inputs.py.
# ruff: noqa: E501
from __future__ import annotations

import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from plm_toolkit.commands.train import run as train_run
from plm_toolkit.data.tokenization.vocabulary_training import train_on_texts
from tests.bad_inputs.test_bad_inputs import Case, assert_one_error_line, command_line
from tests.bad_inputs.test_bad_inputs_store import CORPUS
from tests.training.conftest import QUIET

# GPT-2 with odd sizes and its own kind of vocabulary (data.tokenizer.kind=auto: gpt2_bpe).
GPT2 = ("model=gpt2", "model.hidden_size=36", "model.num_layers=1", "model.num_heads=3", "model.intermediate_size=37",
        "model.max_position_embeddings=64", "data=text_files", "data.max_seq_len=32", "data.tokenizer.vocab_size=300",
        "data.num_proc=1", "trainer.batch_size=4", "trainer.max_steps=2", *QUIET)  # fmt: skip
REFUSED = "{tmp}/bert_tokenizer/tokenizer.json: wraps a text as '[CLS] A [SEP]', with [CLS] before it where model=gpt2 reads a text from its first token (its own tokenizer wraps it as 'A <|endoftext|>'); this tokenizer does not belong to these weights"

CASES = [
    Case("finetune_gpt2_with_bert_tokenizer", "finetune", ("model.checkpoint={tmp}/bert_tokenizer",), REFUSED),
    Case("export_gpt2_with_bert_tokenizer", "export", ("{tmp}/bert_tokenizer", "{tmp}/hf"), REFUSED),
    Case("generate_gpt2_with_bert_tokenizer", "generate", ("checkpoint={tmp}/bert_tokenizer", "prompt=Document"), REFUSED),
    Case("embed_gpt2_with_bert_tokenizer", "embed", ("checkpoint={tmp}/bert_tokenizer", "input_file={tmp}/other.txt", "output_file={tmp}/out.hdf5"), REFUSED),
    Case("finetune_hf_gpt2_with_bert_tokenizer", "finetune", ("model.checkpoint={tmp}/hf_bert_tokenizer",), "{tmp}/hf_bert_tokenizer/tokenizer.json: wraps a text as '[CLS] A [SEP]', with [CLS] before it where model=gpt2"),
]  # fmt: skip


def bert_wordpiece(size: int) -> str:
    """A BERT WordPiece tokenizer.json of at most ``size`` tokens, trained as plm-train trains one."""
    data = OmegaConf.create(
        {"tokenizer": {"kind": "wordpiece", "vocab_size": size, "min_frequency": 1, "lowercase": None}}
    )
    return train_on_texts(data, lambda: CORPUS.splitlines()).to_str()


@pytest.fixture(scope="session")
def gpt2_run(tmp_path_factory) -> Path:
    """A folder with a finished 2-step run of a tiny GPT-2 (``run``), a copy of its checkpoint with a BERT
    tokenizer.json of the same size (``bert_tokenizer``), and its Hugging Face export likewise (``hf_bert_tokenizer``)."""
    from plm_toolkit.interop.hf import export_hf
    from plm_toolkit.interop.pretrained import load_backbone

    root = tmp_path_factory.mktemp("bad_inputs_roles")
    (root / "corpus.txt").write_text(CORPUS, encoding="utf-8")
    (root / "other.txt").write_text("Another document.\n", encoding="utf-8")
    overrides = [*GPT2, f"data.train_files=[{root / 'corpus.txt'}]", f"data.cache_dir={root / 'cache'}"]
    with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
        train_run(compose("train", overrides=overrides), root / "run")
    step = root / "run" / "checkpoints" / "step_2"
    model = load_backbone(step).model
    bert = bert_wordpiece(model.input_embeddings.num_embeddings)
    shutil.copytree(step, root / "bert_tokenizer")
    (root / "bert_tokenizer" / "tokenizer.json").write_text(bert)
    export_hf(root / "hf_bert_tokenizer", model, None, step / "tokenizer.json")
    (root / "hf_bert_tokenizer" / "tokenizer.json").write_text(bert)
    return root


@pytest.fixture(scope="session")
def outcomes(gpt2_run) -> dict[str, dict]:
    env = {**os.environ, "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1"}
    env.pop("HYDRA_FULL_ERROR", None)

    def one(case: Case) -> tuple[str, dict]:
        # plm-finetune's command line names {checkpoint} first; each case's model.checkpoint comes after it.
        step = gpt2_run / "run" / "checkpoints" / "step_2"
        places = {"tmp": str(gpt2_run), "run": str(gpt2_run / "runs" / case.name), "checkpoint": str(step)}
        done = subprocess.run(
            command_line(case, places), cwd=gpt2_run, env=env, capture_output=True, text=True, timeout=300
        )
        return case.name, {"done": done, "places": places}

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, CASES))


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_bert_tokenizer_in_a_gpt2_checkpoint_gets_one_line(case, outcomes):
    assert_one_error_line(case, outcomes[case.name])


@pytest.mark.slow
def test_the_gpt2_checkpoint_with_its_own_tokenizer_generates(gpt2_run):
    env = {**os.environ, "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1"}
    case = Case(
        "own", "generate", ("checkpoint={tmp}/run/checkpoints/step_2", "prompt=Document", "max_new_tokens=3"), ""
    )
    done = subprocess.run(
        command_line(case, {"tmp": str(gpt2_run)}), cwd=gpt2_run, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "error" not in done.stderr
