"""Faults and runs that would lose or mix work, through the real command line: evaluation that cannot run, exports
into a run's checkpoints, two runs on one directory, a fresh start or a changed recipe over an earlier run's
checkpoints, another model family, a run shorter than its checkpoint, a save that hits a file-size limit. Each ends
as test_bad_inputs.py's cases do: status 1, one ``error:`` line naming the key, folder or file, no traceback, the
run's checkpoints untouched. Besides: a finished run rerun and a resume over a torn metrics.jsonl, which succeed.

The cases run in copies of one finished 2-step plm-train run (``{run}``), several at a time, once per session.
"""

# The table of cases reads best one case a line, as in test_bad_inputs.py.
# ruff: noqa: E501
from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.bad_inputs.test_bad_inputs import FILES, Case, command_line, train_tiny_run
from tests.bad_inputs.test_bad_inputs import test_bad_input_gets_one_line_and_loses_nothing as one_line_and_nothing_lost
from tests.conftest import tree_digest
from tests.training.conftest import QUIET


@dataclass(frozen=True)
class FaultCase(Case):
    # Another live process holds the run directory's lock while the case runs.
    locked: bool = False
    # The largest file the case's process may write, in bytes (RLIMIT_FSIZE; writes beyond fail with EFBIG).
    file_limit: int | None = None


XL = ("model=transformer_xl_tiny", "model.hidden_size=24", "model.head_size=12", "model.intermediate_size=37",
      "data=text_files", "data.train_files=[{corpus}]", "data.cache_dir={cache}", "data.max_seq_len=16",
      "data.tokenizer.vocab_size=600", "trainer.batch_size=8", *QUIET)  # fmt: skip
T5 = ("model=t5_tiny", "data=text_files", "data.train_files=[{corpus}]", "data.cache_dir={cache}", *QUIET)

CASES = [
    # --- evaluation can never cost a save: what it needs is checked before step 1 ------------------------------------
    FaultCase("xl_validation_too_short", "train", ("data.validation_files=[{files}/sentences.txt]", "trainer.eval_every=2"), "data.validation_files: 1 window(s) of data.max_seq_len tokens, fewer than the 8 streams (trainer.batch_size=8)", base=XL),
    FaultCase("xl_training_text_too_short", "train", ("data.train_files=[{files}/sentences.txt]", "data.tokenizer.vocab_size=40"), "data.train_files: 1 window(s) of data.max_seq_len tokens, fewer than the 8 streams (trainer.batch_size=8)", base=XL),
    # --- nothing written where a save prunes it -------------------------------------------------------------------
    FaultCase("export_into_checkpoints", "export", ("{run}/checkpoints/last", "{run}/checkpoints/last/hf"), "{run}/checkpoints/last/hf: inside the run's checkpoints folder {run}/checkpoints, whose old steps each save prunes", resume=True),
    FaultCase("average_into_checkpoints", "average", ("{run}", "1", "{run}/checkpoints/averaged"), "{run}/checkpoints/averaged: inside the run's checkpoints folder {run}/checkpoints", resume=True),
    # --- one run per directory ----------------------------------------------------------------------------------
    FaultCase("run_directory_locked", "train", ("trainer.max_steps=4",), "hydra.run.dir={run}: another run is using this directory (pid ", resume=True, locked=True),
    FaultCase("run_directory_locked_finetune", "finetune", (), "hydra.run.dir={run}: another run is using this directory (pid ", resume=True, locked=True),
    FaultCase("fresh_start_over_checkpoints", "train", ("trainer.resume=none",), "trainer.resume=none: {run} holds the checkpoints of an earlier run (newest: step_2), and a fresh start there would mix the two runs; resume it (trainer.resume=auto), give another hydra.run.dir, or replace it with trainer.overwrite=true", resume=True),
    FaultCase("overwrite_and_resume_path", "train", ("trainer.overwrite=true", "trainer.resume={run}"), "trainer.overwrite=true starts afresh; it cannot be combined with trainer.resume={run}", resume=True),
    FaultCase("resume_changes_unknown", "train", ("trainer.resume_changes=maybe",), "trainer.resume_changes=maybe: Invalid value 'maybe', expected one of [refuse, accept]"),
    # --- a resume says what changed and refuses a changed recipe --------------------------------------------------
    FaultCase("resume_changed_corpus_and_lr", "train", ("data.train_files=[{files}/sentences.txt]", "optimizer.lr=1e-3", "trainer.max_steps=4"), "in what is trained: data.train_files {corpus} -> {files}/sentences.txt; optimizer.lr 0.0005 -> 0.001. trainer.resume_changes=accept", resume=True),
    FaultCase("resume_changed_global_batch", "train", ("trainer.batch_size=4", "trainer.max_steps=4"), "trainer.batch_size 8 -> 4", resume=True),
    FaultCase("resume_changed_seed", "train", ("trainer.seed=7",), "trainer.seed 1234 -> 7", resume=True),
    FaultCase("resume_shorter_than_checkpoint", "train", ("trainer.max_steps=1",), "trainer.max_steps: the run would end at step 1, but {run}/checkpoints/step_2 is at step 2 already", resume=True),
    FaultCase("gpt2_over_a_bert_run", "train", ("model=gpt2_tiny", "objective=clm"), "{run}/checkpoints/step_2: holds a plm-train model=bert objective=mlm_nsp run; this is plm-train model=gpt2 objective=clm, which cannot resume it", resume=True),
    FaultCase("t5_over_a_bert_run", "train", (), "{run}/checkpoints/step_2: holds a plm-train model=bert objective=mlm_nsp run; this is plm-train model=t5 objective=span_corruption", resume=True, base=T5),
    FaultCase("finetune_over_a_pretraining_run", "finetune", (), "{run}/checkpoints/step_2: holds a plm-train model=bert objective=mlm_nsp run; this is plm-finetune task=sst2", resume=True),
    # --- a save that cannot be written ------------------------------------------------------------------------
    FaultCase("save_over_file_size_limit", "train", ("trainer.max_steps=4",), "{run}/checkpoints: could not save checkpoint step_4 (File too large writing model.safetensors); the half-written copy is removed and {run}/checkpoints/last still points to step_2", resume=True, file_limit=100_000),
]  # fmt: skip


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory) -> dict[str, Path]:
    """A finished 2-step plm-train run of a tiny BERT on a small corpus."""
    root = tmp_path_factory.mktemp("faults")
    corpus = train_tiny_run(root)
    return {"root": root, "corpus": corpus, "run": root / "run", "cache": root / "cache"}


HOLDER = "import sys, time; from plm_toolkit.core.run_lock import lock_run_directory; lock_run_directory(sys.argv[1]); print('held', flush=True); time.sleep(600)"  # fmt: skip


def hold_lock(run_dir: Path) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(run_dir)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def case_env() -> dict[str, str]:
    env = {**os.environ, "HF_DATASETS_DISABLE_PROGRESS_BARS": "1", "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1"}
    env.pop("HYDRA_FULL_ERROR", None)
    return env


def run_case(case: FaultCase, finished: dict[str, Path], prepare=None) -> dict:
    """Run ``case`` in its own directory (a copy of the finished run with ``resume``, then ``prepare(run_dir)``):
    the process, the places, the checkpoints' digests before and after, and what else is left in the directory."""
    tmp = finished["root"] / "cases" / case.name
    tmp.mkdir(parents=True)
    run_dir = tmp / "run"
    if case.resume:
        shutil.copytree(finished["run"], run_dir, symlinks=True)
    if prepare is not None:
        prepare(run_dir)
    places = {"files": str(FILES), "tmp": str(tmp), "run": str(run_dir), "corpus": str(finished["corpus"]),
              "cache": str(finished["cache"]), "checkpoint": str(finished["run"] / "checkpoints" / "step_2")}  # fmt: skip
    limit = case.file_limit

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    before = tree_digest(run_dir / "checkpoints") if case.resume else None
    holder = hold_lock(run_dir) if case.locked else None
    try:
        done = subprocess.run(command_line(case, places), cwd=tmp, env=case_env(), capture_output=True, text=True,
                              timeout=300, preexec_fn=limited if limit else None)  # fmt: skip
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
    after = tree_digest(run_dir / "checkpoints") if case.resume else None
    left = sorted(p.name for p in tmp.iterdir() if p != run_dir)
    return {"done": done, "places": places, "before": before, "after": after, "left": left}


@pytest.fixture(scope="session")
def fault_outcomes(finished_run) -> dict[str, dict]:
    with ThreadPoolExecutor(max_workers=max(2, min(4, os.cpu_count() or 2))) as pool:
        return dict(zip([c.name for c in CASES], pool.map(lambda c: run_case(c, finished_run), CASES), strict=True))


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_fault_gets_one_line_and_loses_nothing(case, fault_outcomes):
    one_line_and_nothing_lost(case, fault_outcomes)


@pytest.mark.slow
def test_a_finished_run_rerun_trains_and_logs_nothing(finished_run):
    # The 2-step run trained without evaluating. Rerun with a validation file, it trains nothing and runs the final
    # evaluation it lacks, once: a further rerun adds no row (it used to add a duplicate evaluation every time).
    valid = f"data.validation_files=[{finished_run['corpus']}]"
    case = FaultCase("finished_rerun", "train", ("trainer.max_steps=2", "trainer.eval_every=2", valid), "", resume=True)
    first = run_case(case, finished_run)
    done, run_dir = first["done"], Path(first["places"]["run"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "already finished at step 2 (2 steps): nothing to train" in done.stdout
    rows = (run_dir / "metrics.jsonl").read_text()
    assert [json.loads(line)["step"] for line in rows.splitlines() if '"eval_' in line] == [2]
    again = subprocess.run(done.args, cwd=run_dir.parent, env=case_env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and again.stderr == "", again.stderr[-3000:]
    assert "already finished at step 2" in again.stdout and "evaluating" not in again.stdout
    assert (run_dir / "metrics.jsonl").read_text() == rows
    assert tree_digest(run_dir / "checkpoints") == first["before"]


@pytest.mark.slow
def test_a_torn_metrics_line_is_dropped_with_a_warning_and_the_run_resumes(finished_run):
    def tear(run_dir: Path) -> None:
        with (run_dir / "metrics.jsonl").open("a") as f:
            f.write('{"step": 3, "loss": 6.9')  # a crash in the middle of an append

    outcome = run_case(
        FaultCase("torn_metrics", "train", ("trainer.max_steps=3",), "", resume=True), finished_run, tear
    )
    done, metrics = outcome["done"], Path(outcome["places"]["run"]) / "metrics.jsonl"
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{metrics}:3: not a complete metrics record (a write cut short?); dropped" in done.stdout
    assert [json.loads(line)["step"] for line in metrics.read_text().splitlines()] == [1, 2, 3]
