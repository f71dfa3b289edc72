# ruff: noqa: E501  (the table of bad inputs reads best one case a line, as in test_bad_inputs.py)
"""A plm-finetune run as model.checkpoint (``plm-finetune model.checkpoint=<run> trainer.epochs=0``, or plm-export of
the run): a damaged task module is refused in one line naming objective.safetensors or config.yaml and what is
wrong, rather than evaluated as a fresh head; a run evaluated without the finetune.mode it was trained in gets one
warning line naming why its head goes unused, and the evaluation goes on. Through the real command line with
test_bad_inputs.py's harness; each broken run must come out untouched."""

from __future__ import annotations

import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core.command_schema import FinetuneMode, FinetuneModeConfig
from plm_toolkit.core.weights import read_weights
from plm_toolkit.data.tokenization.tokenizer import vocab_from_tokenizer
from plm_toolkit.interop.pretrained import load_backbone
from plm_toolkit.tasks.base import TaskData
from plm_toolkit.tasks.classification import ClassificationConfig, SequenceClassification
from tests.bad_inputs.test_bad_inputs import FILES, Case, check_outcome, command_line
from tests.conftest import save_finetuned, tree_digest
from tests.tasks.conftest import SST2_TRAIN, save_tiny_checkpoint, tiny_tokenizer

EVAL = ("trainer.epochs=0", "data.max_eval_samples=8")
FEATURES = ("finetune.mode=features", "finetune.encoder_hidden_size=7", "finetune.encoder_layers=2")
OBJECTIVE = "{prepared}/{name}/checkpoints/step_1/objective.safetensors"

CASES = [
    Case("ftreload_head_missing", "finetune", EVAL, f"{OBJECTIVE}: missing key(s) head.linear.weight of task=sst2's head (a damaged checkpoint, or an objective.safetensors from another run)", untouched="{prepared}/no_head"),
    Case("ftreload_head_of_another_width", "finetune", EVAL, f"{OBJECTIVE}: head.linear.weight has shape (2, 40); expected (2, 36) (2 label(s) in task.labels in {{prepared}}/wide_head/checkpoints/step_1/config.yaml; hidden size 36)", untouched="{prepared}/wide_head"),
    Case("ftreload_head_nan", "finetune", EVAL, f"{OBJECTIVE}: head.linear.weight holds 1 NaN and 0 infinite value(s); expected finite weights", untouched="{prepared}/nan_head"),
    Case("ftreload_extra_tensor", "finetune", EVAL, f"{OBJECTIVE}: does not hold task=sst2's task module: unexpected key(s) stray.weight", untouched="{prepared}/extra_tensor"),
    Case("ftreload_encoder_tensor_missing", "finetune", (*EVAL, *FEATURES), f"{OBJECTIVE}: does not hold task=sst2's task module: missing key(s) features.lstm.weight_ih_l1", untouched="{prepared}/encoder_gap"),
    Case("ftreload_export_head_missing", "export", ("{prepared}/no_head", "{tmp}/hf"), f"{OBJECTIVE}: missing key(s) head.linear.weight of task=sst2's head (a damaged checkpoint, or an objective.safetensors from another run) (--backbone-only exports the model without the task's head)", untouched="{prepared}/no_head"),
]  # fmt: skip
# Runs to the end: a finetune.mode=features run evaluated in full mode keeps a fresh head, with one warning saying why.
FORGOTTEN = Case("ftreload_features_forgotten", "finetune", EVAL, "{prepared}/features/checkpoints/step_1/objective.safetensors: task head head.linear.bias, head.linear.weight, features.lstm.bias_hh_l0, ", untouched="{prepared}/features")  # fmt: skip


def prepare(prepared: Path) -> None:
    """A fine-tuned SST-2 run of a tiny BERT (hidden 36), in full and in features mode, and copies each broken one
    way: no head tensors, a head of another width, a NaN in the head, a tensor no task module has, a task encoder
    lacking one tensor."""
    texts = [line.split("\t")[0] for line in Path(SST2_TRAIN).read_text().splitlines()[1:]]
    tokenizer = tiny_tokenizer(texts, 300)
    model = load_backbone(save_tiny_checkpoint(prepared / "pretrained", tokenizer)).model
    vocab = vocab_from_tokenizer(tokenizer)
    features = FinetuneModeConfig(mode=FinetuneMode.features, encoder_hidden_size=7, encoder_layers=2)
    for name, finetune in (("full", None), ("features", features)):
        config = ClassificationConfig("sst2", text_column="sentence", labels=["0", "1"])
        task = SequenceClassification(config, model, vocab, TaskData([], None, labels=["0", "1"]), finetune=finetune)
        save_finetuned(prepared / name, model, task, tokenizer)

    def broken(name: str, source: str = "full", change=None) -> Path:
        shutil.copytree(prepared / source, prepared / name, symlinks=True)
        step = prepared / name / "checkpoints" / "step_1"
        if change is not None:
            save_file(change(read_weights(step / ckpt.OBJECTIVE_FILE)), str(step / ckpt.OBJECTIVE_FILE))
        return step

    broken("no_head", change=lambda state: {})
    broken("wide_head", change=lambda state: state | {"head.linear.weight": torch.zeros(2, 40)})
    broken("nan_head", change=lambda state: state | {"head.linear.weight": with_nan(state["head.linear.weight"])})
    broken("extra_tensor", change=lambda state: state | {"stray.weight": torch.zeros(3)})
    broken(
        "encoder_gap",
        "features",
        change=lambda state: {k: v for k, v in state.items() if k != "features.lstm.weight_ih_l1"},
    )


def with_nan(weight: torch.Tensor) -> torch.Tensor:
    weight = weight.clone()
    weight[1, 3] = float("nan")
    return weight


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, dict]:
    """Every case run once, two at a time: name -> the finished process, its placeholders, the digests of the run
    it reads before and after, and what it left in its directory besides its run."""
    root = tmp_path_factory.mktemp("bad_inputs_ftreload")
    prepare(root / "prepared")
    env = {**os.environ, "TQDM_DISABLE": "1"}
    env.pop("HYDRA_FULL_ERROR", None)

    def one(case: Case) -> tuple[str, dict]:
        tmp = root / "cases" / case.name
        tmp.mkdir(parents=True)
        places = {"files": str(FILES), "tmp": str(tmp), "run": str(tmp / "run"), "prepared": str(root / "prepared")}
        kept = Path(case.untouched.format(**places))
        places["checkpoint"] = str(kept)  # the run that plm-finetune starts from
        places["name"] = kept.name
        before = tree_digest(kept)
        done = subprocess.run(command_line(case, places), cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
        left = sorted(p.name for p in tmp.iterdir() if p.name != "run")
        return case.name, {"done": done, "places": places, "before": before, "after": tree_digest(kept), "left": left}

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, [*CASES, FORGOTTEN]))


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_damaged_runs_task_module_gets_one_line(case, outcomes):
    check_outcome(case, outcomes[case.name])


@pytest.mark.slow
def test_a_features_run_evaluated_in_full_mode_gets_one_warning_and_goes_on(outcomes):
    done, places = outcomes[FORGOTTEN.name]["done"], outcomes[FORGOTTEN.name]["places"]
    output = f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    assert done.returncode == 0 and "Traceback" not in done.stdout + done.stderr, output
    (warning,) = [line for line in done.stdout.splitlines() if "[WARNING]" in line]
    assert FORGOTTEN.expected.format(**places) in warning, output
    assert warning.endswith(
        "not used (it reads a task encoder (finetune.mode=features); this run's finetune.mode=full); task=sst2 starts from a fresh head"
    ), output
    assert (Path(places["run"]) / "eval_results.json").is_file()
    assert outcomes[FORGOTTEN.name]["after"] == outcomes[FORGOTTEN.name]["before"]
