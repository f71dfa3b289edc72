# ruff: noqa: E501  (the table of bad inputs reads best one case a line, as in test_bad_inputs.py)
"""task=kbqa's bad inputs through the real command line, with test_bad_inputs.py's harness: an error is one line on
stderr naming the file:line or key, exit status 1, no traceback; the inputs that are only warned about (names of ids
that no triple mentions, evaluation questions about subjects outside the knowledge base) are counted in one log line
each and the run goes on."""

from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.bad_inputs.test_bad_inputs import FILES, Case, command_line
from tests.tasks.conftest import save_tiny_checkpoint, tiny_tokenizer

KBQA = Path(__file__).parents[1] / "tasks" / "files" / "kbqa"
BASE = ("task=kbqa", f"task.kb_triples={KBQA}/kb_triples.tsv", f"task.kb_names={KBQA}/kb_names.tsv",
        f"data.train_file={KBQA}/train.jsonl", f"data.validation_file={KBQA}/test.jsonl")  # fmt: skip

CASES = [
    Case("kbqa_triple_two_fields", "finetune", (*BASE, "task.kb_triples={files}/kbqa_two_fields.tsv"), "{files}/kbqa_two_fields.tsv:3: 2 field(s), expected 3: subject_id<TAB>relation<TAB>object_id (task.kb_triples)"),
    Case("kbqa_training_subject_not_in_kb", "finetune", (*BASE, "data.train_file={files}/kbqa_unknown_subject.jsonl"), "{files}/kbqa_unknown_subject.jsonl:2: subject 'territory/XX' is not a subject of the knowledge base (task.kb_triples)"),
    Case("kbqa_simplequestions_three_fields", "finetune", (*BASE, "data.validation_file={files}/kbqa_three_fields.txt"), "{files}/kbqa_three_fields.txt:1: 3 field(s), expected SimpleQuestions' 4: subject<TAB>relation<TAB>object<TAB>question"),
    Case("kbqa_triples_unset", "finetune", (*BASE, "task.kb_triples="), "task.kb_triples is not set: give the knowledge base's triples TSV file"),
    Case("kbqa_names_missing", "finetune", (*BASE, "task.kb_names={tmp}/names.tsv"), "task.kb_names: {tmp}/names.tsv is not a file"),
    Case("kbqa_threshold_above_one", "finetune", (*BASE, "task.fuzzy_threshold=1.5"), "task.fuzzy_threshold=1.5: expected a ratio in (0, 1]"),
]  # fmt: skip
# Runs to the end: two name rows of ids absent from the triples, and an evaluation question about one of them.
WARNED = Case("kbqa_warned", "finetune", (*BASE, "task.kb_names={tmp}/names.tsv", "data.validation_file={tmp}/test.jsonl",
              "data.max_train_samples=16", "trainer.epochs=null", "trainer.max_steps=1"), "")  # fmt: skip


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, dict]:
    """Every case run once, two at a time, on a tiny BERT: name -> the finished process and its placeholders."""
    root = tmp_path_factory.mktemp("bad_inputs_kbqa")
    texts = (KBQA / "train.jsonl").read_text(encoding="utf-8").splitlines()
    checkpoint = save_tiny_checkpoint(root / "bert", tiny_tokenizer([json.loads(t)["question"] for t in texts], 300))
    env = {**os.environ, "HF_DATASETS_DISABLE_PROGRESS_BARS": "1", "TQDM_DISABLE": "1"}
    env.pop("HYDRA_FULL_ERROR", None)

    def one(case: Case) -> tuple[str, dict]:
        tmp = root / case.name
        tmp.mkdir()
        if case is WARNED:
            names = (KBQA / "kb_names.tsv").read_text(encoding="utf-8") + "nowhere/1\tAtlantis\nnowhere/2\tLemuria\n"
            (tmp / "names.tsv").write_text(names, encoding="utf-8")
            row = {"question": "What currency is used in Atlantis?", "subject": "nowhere/1", "answers": ["x"]}
            test = (KBQA / "test.jsonl").read_text(encoding="utf-8").splitlines()[:3] + [json.dumps(row)]
            (tmp / "test.jsonl").write_text("\n".join(test) + "\n", encoding="utf-8")
        places = {"files": str(FILES), "tmp": str(tmp), "run": str(tmp / "run"), "checkpoint": str(checkpoint)}
        done = subprocess.run(command_line(case, places), cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
        left = sorted(p.name for p in tmp.iterdir() if p.name not in ("run", "names.tsv", "test.jsonl"))
        return case.name, {"done": done, "places": places, "left": left}

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, [*CASES, WARNED]))


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_kbqa_bad_input_gets_one_line(case, outcomes):
    done, places = outcomes[case.name]["done"], outcomes[case.name]["places"]
    output = f"stdout:\n{done.stdout[-2000:]}\nstderr:\n{done.stderr[-3000:]}"
    assert done.returncode == 1, output
    assert "Traceback" not in done.stdout + done.stderr, output
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), output
    assert case.expected.format(**places) in lines[0], output
    assert outcomes[case.name]["left"] == [], f"left in the case's directory: {outcomes[case.name]['left']}"


@pytest.mark.slow
def test_kbqa_names_of_absent_ids_and_unknown_evaluation_subjects_are_counted(outcomes):
    done, places = outcomes[WARNED.name]["done"], outcomes[WARNED.name]["places"]
    output = f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    assert done.returncode == 0 and "Traceback" not in done.stdout + done.stderr, output
    tmp = places["tmp"]
    assert f"{tmp}/names.tsv: 2 name row(s) for ids that no triple mentions were left out" in done.stdout, output
    assert f"{tmp}/test.jsonl: 1 question(s) whose gold subject is not in the knowledge base count as wrong" in (
        done.stdout
    ), output
    run = Path(places["run"])
    assert json.loads((run / "eval_results.json").read_text())["questions"] == 4
    last = json.loads((run / "predictions.jsonl").read_text().splitlines()[-1])
    assert last["line"] == 4 and last["entity"] != "nowhere/1" and "x" not in last["answers"]
