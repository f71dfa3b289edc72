"""plm-glue's bad inputs through the real command line, checked as test_bad_inputs.py checks every command's: exit
status 1, one ``error:`` line naming the folder, file:line or key, no traceback, nothing left beside the run. Every
case fails before a backbone is read, so ``model.checkpoint`` is any existing folder; each case costs a Python start
(about 4 s on a 2-core machine), hence ``slow`` as the harness's own test."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.bad_inputs.test_bad_inputs import FILES, Case, check_outcome

CASES = [
    Case("glue_no_task_files", "glue", ("data.glue_dir={files}",), "data.glue_dir={files}: no GLUE task found; looked for CoLA/train.tsv, SST-2/train.tsv, MRPC/train.tsv, STS-B/train.tsv, QQP/train.tsv, MNLI/train.tsv, QNLI/train.tsv, RTE/train.tsv, WNLI/train.tsv"),
    Case("glue_wrong_columns", "glue", ("data.glue_dir={files}/glue_wrong_columns",), "{files}/glue_wrong_columns/RTE/train.tsv:1: no column 'sentence1' (task.text_column); the columns are index, premise, hypothesis, label"),
    Case("glue_task_without_dev", "glue", ("data.glue_dir={files}/glue_no_dev",), "data.glue_dir={files}/glue_no_dev: task SST-2 lacks {files}/glue_no_dev/SST-2/dev.tsv"),
    Case("glue_unknown_task", "glue", ("data.glue_dir={files}/glue_no_dev", "glue.tasks=[sst]"), "glue.tasks: unknown sst; the GLUE tasks are cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli"),
    Case("glue_no_learning_rate", "glue", ("data.glue_dir={files}", "glue.learning_rates=[]"), "glue.learning_rates=[]: expected one or more distinct finite rates above 0"),
    Case("glue_override_unknown_key", "glue", ("data.glue_dir={files}/glue_wrong_columns", "+glue.task_overrides.rte.trainer.epoch=3"), "glue.task_overrides.rte: Key 'epoch' not in 'TrainerConfig'"),
    Case("glue_override_of_the_grid", "glue", ("data.glue_dir={files}", "+glue.task_overrides.rte.optimizer.lr=1e-5"), "glue.task_overrides.rte.optimizer.lr: set by the suite"),
]  # fmt: skip


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, dict]:
    """Every case run once as ``python -m plm_toolkit.commands.glue.command``, two at a time, in a directory of its own."""
    root = tmp_path_factory.mktemp("bad_inputs_glue")
    env = {**os.environ, "TQDM_DISABLE": "1"}
    env.pop("HYDRA_FULL_ERROR", None)

    def one(case: Case) -> tuple[str, dict]:
        tmp = root / case.name
        tmp.mkdir()
        places = {"files": str(FILES), "tmp": str(tmp), "run": str(tmp / "run")}
        args = ["model.checkpoint={files}", "hardware=cpu", "hydra.run.dir={run}", *case.overrides]
        command = [sys.executable, "-m", "plm_toolkit.commands.glue.command", *(a.format(**places) for a in args)]
        done = subprocess.run(command, cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
        left = sorted(p.name for p in tmp.iterdir() if p.name != "run")
        return case.name, {"done": done, "places": places, "before": None, "after": None, "left": left}

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, CASES))


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_glue_bad_input_gets_one_line(case, outcomes):
    check_outcome(case, outcomes[case.name])
