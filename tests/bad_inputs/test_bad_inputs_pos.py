# ruff: noqa: E501  (the table of bad inputs reads best one case a line, as in test_bad_inputs.py)
"""task=pos's bad inputs through the real command line, with test_bad_inputs.py's harness: an error is one line on
stderr naming the CoNLL-U file:line (or the key) and what was expected, exit status 1, no traceback."""

from __future__ import annotations

import os
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from plm_toolkit.core.resources import resource_path
from tests.bad_inputs.test_bad_inputs import FILES, Case, assert_one_error_line, command_line
from tests.tasks.conftest import save_tiny_checkpoint, tiny_tokenizer

POS = ("task=pos", "data.train_file={files}/pos_train.conllu", "data.validation_file={files}/pos_train.conllu",
       "trainer.epochs=null", "trainer.max_steps=1")  # fmt: skip

CASES = [
    Case("pos_wrong_column_count", "finetune", (*POS, "data.train_file={files}/pos_wrong_columns.conllu"), "{files}/pos_wrong_columns.conllu:5: 9 tab-separated column(s), expected CoNLL-U's 10 (ID FORM LEMMA UPOS XPOS FEATS HEAD DEPREL DEPS MISC)"),
    # Line 10, the multiword token "don't", has no tags either: it is skipped, as UD's evaluation skips it.
    Case("pos_blank_tag", "finetune", (*POS, "data.train_file={files}/pos_blank_tag.conllu"), "{files}/pos_blank_tag.conllu:11: no UPOS tag ('_') on the word 'do'; task.column=upos needs one on every word"),
    Case("pos_dev_tag_unknown", "finetune", (*POS, "data.validation_file={files}/pos_unknown_tag.conllu"), "{files}/pos_unknown_tag.conllu:6: tag 'INTJ' does not occur in the training file"),
    Case("pos_dev_xpos_unknown", "finetune", (*POS, "task.column=xpos", "data.validation_file={files}/pos_unknown_tag.conllu"), "{files}/pos_unknown_tag.conllu:6: tag 'UH' does not occur in the training file"),
    Case("pos_column_unknown", "finetune", (*POS, "task.column=lemma"), "task.column=lemma: expected upos or xpos"),
    Case("pos_id_not_a_number", "finetune", (*POS, "data.train_file={files}/pos_bad_id.conllu"), "{files}/pos_bad_id.conllu:3: ID 'x' is not a word number (1, 2, ...), a multiword token's range (3-4) or an empty node (5.1); expected CoNLL-U's first column"),
    Case("pos_missing_blank_line", "finetune", (*POS, "data.validation_file={files}/pos_missing_blank_line.conllu"), "{files}/pos_missing_blank_line.conllu:6: word ID 1 where the sentence's word 4 comes; IDs count a sentence's words from 1, and a blank line ends each sentence"),
    # A file in another format (a GLUE TSV) given as the validation file.
    Case("pos_not_conllu", "finetune", ("task=pos", "data.train_file={files}/pos_train.conllu", f"data.validation_file={resource_path('corpora/sst2/dev.tsv')}"), f"{resource_path('corpora/sst2/dev.tsv')}:1: 2 tab-separated column(s), expected CoNLL-U's 10"),
]  # fmt: skip


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, dict]:
    """Every case run once, two at a time, on a tiny BERT: name -> the finished process and its placeholders."""
    root = tmp_path_factory.mktemp("bad_inputs_pos")
    texts = ["Sue likes coffee .", "I do n't know", "Wow !", "Sue runs"] * 20
    checkpoint = save_tiny_checkpoint(root / "bert", tiny_tokenizer(texts, 120))
    env = {**os.environ, "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1"}
    env.pop("HYDRA_FULL_ERROR", None)

    def one(case: Case) -> tuple[str, dict]:
        tmp = root / case.name
        tmp.mkdir()
        places = {"files": str(FILES), "tmp": str(tmp), "run": str(tmp / "run"), "checkpoint": str(checkpoint)}
        done = subprocess.run(command_line(case, places), cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
        return case.name, {
            "done": done,
            "places": places,
            "left": sorted(p.name for p in tmp.iterdir() if p.name != "run"),
        }

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, CASES))


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_pos_bad_input_gets_one_line(case, outcomes):
    assert_one_error_line(case, outcomes[case.name])
    assert outcomes[case.name]["left"] == [], f"left in the case's directory: {outcomes[case.name]['left']}"
