"""Bad paper recipes and optimizer options through the real command line (the harness of test_bad_inputs.py): exit
status 1, one ``error:`` line naming the recipe and the model or the key and its range, no traceback, nothing
written. Every case stops at validation, before any data or model work, so none needs a finished run. The range of
every optimizer key is tested in-process too (tests/training/test_paper_optimizers.py)."""

from __future__ import annotations

import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from plm_toolkit.core.resources import resource_path
from tests.bad_inputs.test_bad_inputs import FILES, Case, assert_one_error_line, command_line

CASES = [
    Case("recipe_other_family", "train", ("experiment=t5_base_paper", "model=bert_base"), "experiment=t5_base_paper is a recipe for t5 models and model=bert_base is a bert model: pick a t5 preset"),
    Case("recipe_elmo_on_transformer", "train", ("experiment=elmo_paper", "model=transformer_base"), "experiment=elmo_paper is a recipe for elmo models and model=transformer_base is a transformer model"),
    Case("lamb_fused", "train", ("optimizer=lamb", "hardware.optimizer_implementation=fused"), "hardware.optimizer_implementation=fused: optimizer.name=lamb has no fused kernel; use auto"),
    Case("bias_correction_without_lamb", "train", ("optimizer.bias_correction=false",), "optimizer.bias_correction=False is read by optimizer.name=lamb only, not by optimizer.name=adamw"),
    Case("adafactor_decay_rate_above_one", "train", ("optimizer=adafactor", "optimizer.decay_rate=1.5"), "optimizer.decay_rate=1.5: expected a finite number in (0, 1]"),
    Case("adafactor_inverse_sqrt_without_steps", "train", ("optimizer=adafactor", "optimizer.schedule=constant_then_inverse_sqrt"), "optimizer.schedule=constant_then_inverse_sqrt needs optimizer.warmup_steps >= 1"),
    Case("adagrad_accumulator_negative", "train", ("optimizer=adagrad", "optimizer.initial_accumulator=-1"), "optimizer.initial_accumulator=-1.0: expected a finite number in [0, inf)"),
    Case("accumulator_without_adagrad", "finetune", ("optimizer.initial_accumulator=1.0",), "optimizer.initial_accumulator=1.0 is read by optimizer.name=adagrad only"),
]  # fmt: skip


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, dict]:
    """Every case run once, two at a time: name -> the finished process, its placeholders and what its directory
    holds afterwards."""
    root = tmp_path_factory.mktemp("bad_recipes")
    corpus = root / "corpus.txt"
    corpus.write_text(Path(resource_path("corpora/wikitext2/train.txt")).read_text()[:4000])
    checkpoint = root / "checkpoint"  # plm-finetune's validation only asks that it exists
    checkpoint.mkdir()
    env = {**os.environ, "HF_DATASETS_DISABLE_PROGRESS_BARS": "1", "TQDM_DISABLE": "1"}
    env.pop("HYDRA_FULL_ERROR", None)

    def one(case: Case) -> tuple[str, dict]:
        tmp = root / "cases" / case.name
        tmp.mkdir(parents=True)
        places = {
            "files": str(FILES),
            "tmp": str(tmp),
            "run": str(tmp / "run"),
            "checkpoint": str(checkpoint),
            "corpus": str(corpus),
            "cache": str(root / "cache"),
        }
        done = subprocess.run(command_line(case, places), cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
        return case.name, {"done": done, "places": places, "left": sorted(p.name for p in tmp.iterdir())}

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, CASES))


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_recipe_or_optimizer_gets_one_line(case, outcomes):
    outcome = outcomes[case.name]
    assert_one_error_line(case, outcome)
    # Refused at validation: no checkpoint, no cache, nothing but Hydra's log in the run directory.
    run = Path(outcome["places"]["run"])
    assert outcome["left"] in ([], ["run"]) and not (run / "checkpoints").exists(), outcome["left"]
    assert not Path(outcome["places"]["cache"]).exists()
