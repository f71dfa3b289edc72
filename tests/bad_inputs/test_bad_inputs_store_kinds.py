"""Bad inputs of ERNIE's knowledge units and of parallel text in the token store, through the real command line
(plm-prepare, plm-train): a store prepared with other unit sources or holding no units, a corpus without letters
given to plm-prepare, a store of pairs in other languages or given to a monolingual run, each get exit status 1 and
one line on stderr starting ``error:``, no traceback. Uses test_bad_inputs.py's harness (its command lines)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.bad_inputs.test_bad_inputs import FILES, Case, command_line, run_cases
from tests.bad_inputs.test_bad_inputs_store import CORPUS

BASE = ("model=ernie", "model.hidden_size=36", "model.num_heads=3", "model.intermediate_size=37",
         "model.num_layers=1", "data=text_files", "data.max_seq_len=32", "data.tokenizer.kind=wordpiece",
         "data.tokenizer.vocab_size=200", "data.cache_dir={tmp}/cache", "data.num_proc=1", "trainer.max_steps=1",
         "trainer.progress_bar=false", "trainer.tensorboard=false", "hardware=cpu")  # fmt: skip
ERNIE = (*BASE, "objective.entity_gazetteer={tmp}/gazetteer.txt")
TRAIN = (*ERNIE, "data.train_files=[{tmp}/corpus.txt]", "data.store={tmp}/store")
PAIRS = ("model=transformer", "model.hidden_size=32", "model.num_heads=2", "model.intermediate_size=48",
         "model.max_position_embeddings=64", "data.max_seq_len=48", "data.tokenizer.kind=wordpiece",
         "data.tokenizer.vocab_size=200", "data.cache_dir={tmp}/cache", "data.num_proc=1", "trainer.max_steps=1",
         "trainer.progress_bar=false", "trainer.tensorboard=false", "hardware=cpu",
         "data.train_files=[{tmp}/pairs.jsonl]", "data.store={tmp}/pairs_store")  # fmt: skip

CASES = [
    Case("units_store_other_gazetteer", "train", ("objective.entity_gazetteer={tmp}/other_gazetteer.txt",), "data.store={tmp}/store holds knowledge units found with another objective.entity_gazetteer (its contents) or objective.entity_gazetteer_case than this run's", base=TRAIN),
    Case("units_store_other_segmenter", "train", ("objective.presegmented=true",), "holds knowledge units found with another objective.presegmented than this run's", base=TRAIN),
    Case("units_store_without_units", "train", ("data.store={tmp}/bert_store",), "data.store={tmp}/bert_store holds sentences tokenized one by one (sentence pairs and sentence streams); this run needs sentences tokenized one by one with their knowledge units' join codes (ERNIE)", base=TRAIN),
    Case("pairs_store_other_languages", "train", ("data.source_lang=de", "data.target_lang=en"), "data.store={tmp}/pairs_store holds data.source_lang=en; this run needs data.source_lang=de", base=PAIRS),
    Case("pairs_store_given_to_ernie", "train", ("data.store={tmp}/pairs_store",), "data.store={tmp}/pairs_store holds sentence pairs for translation; this run needs sentences tokenized one by one with their knowledge units' join codes (ERNIE)", base=TRAIN),
    Case("units_store_given_to_translation", "train", ("data.store={tmp}/store",), "data.store={tmp}/store holds sentences tokenized one by one with their knowledge units' join codes (ERNIE); this run needs sentence pairs for translation", base=PAIRS),
    Case("units_prepare_no_letters", "prepare", (*ERNIE, f"data.train_files=[{FILES}/digits_corpus.txt]", "data.store={tmp}/digits"), f"{FILES}/digits_corpus.txt has no letters"),
]  # fmt: skip


def setup(tmp: Path) -> None:
    """The corpus, two gazetteers, an ERNIE store prepared with the first and a BERT store of plain sentences."""
    (tmp / "corpus.txt").write_text(CORPUS, encoding="utf-8")
    (tmp / "gazetteer.txt").write_text("Document 3\n", encoding="utf-8")
    (tmp / "other_gazetteer.txt").write_text("Document 4\n", encoding="utf-8")
    rows = [{"en": f"Document {k} starts.", "de": f"Dokument {k} beginnt."} for k in range(200)]
    (tmp / "pairs.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    places = {"tmp": str(tmp)}
    prepare = Case("setup", "prepare", TRAIN, "")
    bert_store = ("data.train_files=[{tmp}/corpus.txt]", "data.store={tmp}/bert_store")
    bert = Case("setup", "prepare", (*BASE, "model=bert_tiny", "objective=mlm_nsp", *bert_store), "")
    pairs = Case("setup", "prepare", PAIRS, "")
    for case in (prepare, bert, pairs):
        done = subprocess.run(command_line(case, places), cwd=tmp, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("bad_units_store")
    setup(root)
    return run_cases(CASES, root)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_units_store_input_gets_one_line(case, outcomes):
    done = outcomes[case.name]["done"]
    output = f"stdout:\n{done.stdout[-2000:]}\nstderr:\n{done.stderr[-3000:]}"
    assert done.returncode == 1, output
    assert "Traceback" not in done.stdout + done.stderr, output
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), output
    assert case.expected.format(**outcomes[case.name]["places"]) in lines[0], output
