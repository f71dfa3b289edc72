"""plm-export reads the run's tokenizer to write what transformers needs beside it (tokenizer_config.json, the
special-token ids in config.json): a checkpoint whose tokenizer.json does not load is refused in one line naming it,
with or without --backbone-only, where it used to be copied into a folder AutoTokenizer could not read. Run through
the real command line with the harness of ``test_bad_inputs.py``."""

import subprocess

import pytest
from tokenizers import Tokenizer

from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.models.bert import Bert, BertConfig
from tests.conftest import save_untrained, tree_digest
from tests.tasks.conftest import tiny_tokenizer

from .test_bad_inputs import Case, command_line

CASES = [
    Case("export_tokenizer_cut_short", "export", ("{checkpoint}", "{tmp}/hf"),
         "{checkpoint}/tokenizer.json does not load ("),
    Case("export_tokenizer_cut_short_backbone", "export", ("{checkpoint}", "{tmp}/hf", "--backbone-only"),
         "{checkpoint}/tokenizer.json does not load ("),
    Case("export_tokenizer_not_a_tokenizer", "export", ("{prepared}", "{tmp}/hf", "--backbone-only"),
         "{prepared}/tokenizer.json does not load ("),
]  # fmt: skip


@pytest.fixture(scope="module")
def broken(tmp_path_factory) -> dict[str, str]:
    """Two plm-train checkpoints of a tiny BERT: one whose tokenizer.json is cut short, one whose tokenizer.json is
    JSON but no tokenizer."""
    root = tmp_path_factory.mktemp("tokexport")
    tokenizer: Tokenizer = tiny_tokenizer(["the cat sat on the mat", "a dog ran in the park"] * 20, vocab_size=60)
    config = BertConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=36, num_layers=2, num_heads=3)
    cut = save_untrained(root / "cut", Bert(config), tokenizer)
    text = (cut / ckpt.TOKENIZER_FILE).read_text()
    (cut / ckpt.TOKENIZER_FILE).write_text(text[: len(text) // 2])
    other = save_untrained(root / "other", Bert(config), tokenizer)
    (other / ckpt.TOKENIZER_FILE).write_text('{"vocab": ["the", "cat"]}\n')
    return {"checkpoint": str(cut), "prepared": str(other), "root": str(root)}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_tokenizer_that_does_not_load_is_refused_in_one_line(case, broken, tmp_path):
    places = {**broken, "tmp": str(tmp_path)}
    before = tree_digest(tmp_path.parent)
    done = subprocess.run(command_line(case, places), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    output = f"stdout:\n{done.stdout[-2000:]}\nstderr:\n{done.stderr[-3000:]}"
    assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr, output
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: tokenizer file "), output
    assert case.expected.format(**places) in lines[0], output
    assert tree_digest(tmp_path.parent) == before  # no export, no temporary folder left beside it
