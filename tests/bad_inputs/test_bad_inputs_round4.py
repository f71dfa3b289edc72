"""The fourth round of bad inputs and faults (issue 38), through the real command line: numbers that overflow or
mean nothing (blend weights of 1e308, a negative early-stopping threshold, a negative top_words), settings obeyed in
part (a corpus file in two blend sources, preparation parts launched with other data.prepare_parts or other
settings, early stopping without validation data), lines that blamed the wrong key or hid the difference (a resumed
blend whose weight changed, data.prepare_parts=0), an export onto a full disk, a checkpoint of a run that is still
training removed while it was read. Each gets exit status 1 and one ``error:`` line naming the key, file or folder
(test_bad_inputs.py's ``assert_one_error_line``). Trackers: test_bad_inputs_trackers.py.

The cases that need a finished run share one (a 1-step blend of two sources, copied per case); they run two at a
time, once per session.
"""

# The table of cases reads best one case a line, as in test_bad_inputs.py.
# ruff: noqa: E501
from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest

from plm_toolkit.core.resources import resource_path
from tests.bad_inputs.test_bad_inputs import Case, assert_one_error_line, command_line
from tests.bad_inputs.test_bad_inputs_faults import hold_lock
from tests.bad_inputs.test_bad_inputs_round3 import quiet_env
from tests.bad_inputs.test_bad_inputs_store import StoreCase, limited
from tests.training.conftest import QUIET

GPT = (
    "model=gpt2_tiny",
    "data=text_files",
    "data.cache_dir={tmp}/cache",
    "data.num_proc=1",
    "trainer.max_steps=1",
    *QUIET,
)
WIKI = "{{name:wiki,files:[{tmp}/a.txt],weight:0.7}}"
CODE = "{{name:code,files:[{tmp}/b.txt],weight:0.3}}"
BLEND = (*GPT, f"data.sources=[{WIKI},{CODE}]")
PARTS = ("model=bert_tiny", "objective=mlm", "data=text_files", "data.train_files=[{tmp}/parts.txt]", "data.store={tmp}/store",
         "data.num_proc=1", "data.shard_bytes=8192", "data.document_boundary=line", "data.tokenizer.vocab_size=300")  # fmt: skip
LIVE = "the run {tmp}/live is still training (pid "


# A case (test_bad_inputs_store.StoreCase: the Case, its setup, a file-size limit) and what its folder holds besides
# the corpus files (``setup``): "run" (a copy of the finished blend run in {tmp}/run), "part" (part 0 of 2 of a store
# prepared in {tmp}/store), "live" (that run in {tmp}/live, a step half removed, its lock held by a live process while
# the case runs), "fake" (an empty folder {tmp}/fake). {root}: the folder of the finished run, whose files it read.
CASES = [
    # --- numbers: a range, and sums that stay finite -------------------------------------------------------------
    StoreCase(Case("blend_weights_overflow", "train", ("data.sources=[{{name:wiki,files:[{tmp}/a.txt],weight:1e308}},{{name:code,files:[{tmp}/b.txt],weight:1e308}}]",), "data.sources: the weights (1e+308, 1e+308) add up to more than the largest number a float holds (1.8e308); they are shares of the examples: give the same ratios in smaller numbers", base=GPT)),
    StoreCase(Case("early_stopping_threshold_negative", "train", ("data.train_files=[{tmp}/a.txt]", "trainer.early_stopping_patience=2", "trainer.early_stopping_threshold=-0.5"), "trainer.early_stopping_threshold=-0.5: expected a change of the metric (0: any improvement counts) in [0, inf)", base=GPT)),
    StoreCase(Case("extend_top_words_negative", "train", ("model.checkpoint={tmp}/fake", "data.train_files=[{tmp}/a.txt]", "data.tokenizer.extend.top_words=-3"), "data.tokenizer.extend.top_words=-3: must be 0 (none) or a number of words to add", base=GPT), "fake"),
    # --- settings obeyed in part -----------------------------------------------------------------------------------
    StoreCase(Case("early_stopping_without_validation", "train", ("data.train_files=[{tmp}/a.txt]", "trainer.early_stopping_patience=2", "trainer.eval_every=1"), "trainer.early_stopping_patience=2: early stopping compares evaluations, and this run has no validation data, so it would train its whole length; give validation files", base=GPT)),
    StoreCase(Case("finetune_early_stopping_without_validation_file", "finetune", ("model.checkpoint={tmp}/fake", "data.validation_file=null", "trainer.early_stopping_patience=2"), "trainer.early_stopping_patience=2: early stopping compares evaluations, and there is no data.validation_file to evaluate on"), "fake"),
    StoreCase(Case("blend_file_in_two_sources", "train", ("data.sources=[{{name:wiki,files:[{tmp}/a.txt]}},{{name:all,files:['{tmp}/*.txt']}}]",), "data.sources[1].files: {tmp}/a.txt is in data.sources[0].files too (by '{tmp}/a.txt'; here by '{tmp}/*.txt'), so it would be trained twice; list it in one source", base=GPT)),
    StoreCase(Case("blend_file_twice_in_one_source", "train", ("data.sources=[{{name:wiki,files:[{tmp}/a.txt,{tmp}/./a.txt]}},{{name:code,files:[{tmp}/b.txt]}}]",), "data.sources[0].files: {tmp}/./a.txt is listed twice (by '{tmp}/a.txt' and '{tmp}/./a.txt'), so it would be trained twice", base=GPT)),
    StoreCase(Case("prepare_parts_mismatch", "prepare", (*PARTS, "data.prepare_parts=3", "data.prepare_part=1"), "data.prepare_parts=3: the token store {tmp}/store is being prepared in data.prepare_parts=2 parts (recorded by the job that began it, {tmp}/store/prepare_parts.json); launch every part with data.prepare_parts=2"), "part"),
    # --- lines that name the key and both values ------------------------------------------------------------------
    StoreCase(Case("resume_blend_weight_changed", "train", ("data.sources=[{{name:wiki,files:[{root}/a.txt],weight:0.7}},{{name:code,files:[{root}/b.txt],weight:0.5}}]", "trainer.max_steps=2"), "in what is trained: data.sources[1].weight 0.3 -> 0.5. trainer.resume_changes=accept", base=GPT), "run"),
    StoreCase(Case("prepare_parts_zero", "prepare", (*PARTS, "data.prepare_parts=0"), "data.prepare_parts=0: expected 1 (one job) or the number of jobs that share the store")),
    StoreCase(Case("prepare_part_other_settings", "prepare", (*PARTS, "data.prepare_parts=2", "data.prepare_part=1", "data.tokenizer.vocab_size=320"), "data.store={tmp}/store holds an unfinished preparation with data.tokenizer.vocab_size=300, where this run asks for 320: give the settings it was begun with (every part of a preparation across nodes needs the same), or another folder (removing the folder throws away the shards prepared so far)"), "part"),
    StoreCase(Case("export_onto_a_full_disk", "export", ("{tmp}/run", "{tmp}/hf"), "{tmp}/hf: could not be written (File too large writing model.safetensors); the partial copy is removed and {tmp}/hf is as it was: free space on its file system"), "run", file_limit=20_000),
    StoreCase(Case("token_files_onto_a_full_disk", "export", ("{tmp}/run/store", "{tmp}/megatron", "--format", "megatron"), "{tmp}/megatron: could not be written (File too large); the partial copy is removed"), "run", file_limit=4_000),
    StoreCase(Case("export_of_a_step_being_pruned", "export", ("{tmp}/live/checkpoints/step_1", "{tmp}/hf"), "{tmp}/live/checkpoints/step_1: removed while it was read: " + LIVE), "live"),
    StoreCase(Case("generate_from_a_step_being_pruned", "generate", ("checkpoint={tmp}/live/checkpoints/step_1", "prompt=a"), "{tmp}/live/checkpoints/step_1: removed while it was read: " + LIVE), "live"),
]  # fmt: skip


def write_corpus(tmp: Path) -> None:
    text = Path(resource_path("corpora/wikitext2/train.txt")).read_text(encoding="utf-8")
    (tmp / "a.txt").write_text(text[:30000], encoding="utf-8")
    (tmp / "b.txt").write_text(text[-30000:], encoding="utf-8")
    lines = [f"Line {k} of the corpus says {'something ' * (k % 7)}and ends." for k in range(3000)]
    (tmp / "parts.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


def run_line(case: Case, places: dict[str, str], tmp: Path, file_limit: int | None = None):
    return subprocess.run(command_line(case, places), cwd=tmp, env=quiet_env(), capture_output=True, text=True,
                          timeout=300, preexec_fn=limited(file_limit))  # fmt: skip


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished 1-step run of a blend of a.txt and b.txt (``run``) with a store of its own (``run/store``), and part
    0 of 2 of a store prepared across nodes (``store``)."""
    root = tmp_path_factory.mktemp("bad_inputs_round4")
    write_corpus(root)
    places = {"tmp": str(root), "run": str(root / "run")}
    for case in (
        Case("blend", "train", (), "", base=BLEND),
        Case("part", "prepare", (*PARTS, "data.prepare_parts=2", "data.prepare_part=0"), ""),
    ):
        done = run_line(case, places, root)
        assert done.returncode == 0, done.stderr[-3000:]
    store = Case(
        "store",
        "prepare",
        ("model=gpt2_tiny", "data=text_files", "data.train_files=[{tmp}/a.txt]", "data.store={tmp}/run/store"),
        "",
    )
    done = run_line(store, places, root)
    assert done.returncode == 0, done.stderr[-3000:]
    return root


def setup(round4: StoreCase, tmp: Path, finished: Path) -> None:
    write_corpus(tmp)
    if round4.setup == "run":
        shutil.copytree(finished / "run", tmp / "run", symlinks=True)
    if round4.setup == "live":
        shutil.copytree(finished / "run", tmp / "live", symlinks=True)
        (tmp / "live" / "checkpoints" / "step_1" / "model.safetensors").unlink()  # a prune's rmtree half done
    if round4.setup == "part":
        shutil.copy2(finished / "parts.txt", tmp / "parts.txt")  # the modification time the plan records
        shutil.copytree(finished / "store", tmp / "store")
        (tmp / "store" / "plan.json").write_text(
            (finished / "store" / "plan.json").read_text().replace(str(finished), str(tmp))
        )
    if round4.setup == "fake":
        (tmp / "fake").mkdir()


@contextmanager
def lock_held(folder: Path | None) -> Iterator[None]:
    """A live process holds ``folder``'s run lock (a run still training there) while the block runs."""
    holder = hold_lock(folder) if folder is not None else None
    try:
        yield
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()


@pytest.fixture(scope="module")
def outcomes(finished) -> dict[str, dict]:
    def one(round4: StoreCase) -> tuple[str, dict]:
        tmp = finished / "cases" / round4.case.name
        tmp.mkdir(parents=True)
        setup(round4, tmp, finished)
        places = {"tmp": str(tmp), "run": str(tmp / "run"), "checkpoint": str(tmp / "fake"), "root": str(finished)}
        with lock_held(tmp / "live" if round4.setup == "live" else None):
            done = run_line(round4.case, places, tmp, round4.file_limit)
        return round4.case.name, {"done": done, "places": places, "tmp": tmp}

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, CASES))


@pytest.mark.slow
@pytest.mark.parametrize("round4", CASES, ids=[c.case.name for c in CASES])
def test_round_four_bad_input_gets_one_line_and_leaves_nothing(round4, outcomes):
    assert_one_error_line(round4.case, outcomes[round4.case.name])
    tmp = outcomes[round4.case.name]["tmp"]
    left = sorted(p.name for p in tmp.iterdir() if p.name.startswith((".tmp-", ".hf", ".megatron")))
    assert left == [] and not (tmp / "hf").exists() and not (tmp / "megatron").exists(), f"left behind: {left}"
