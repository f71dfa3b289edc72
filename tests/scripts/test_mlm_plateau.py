"""scripts/mlm_plateau.py: transformers' BertForMaskedLM at width 128 leaves the MLM plateau within a few hundred
steps with initializer_range 0.1 and stays on it with BERT's 0.02 (docs/demo.md)."""

import importlib.util

import pytest
import torch

from tests.scripts import SCRIPTS, run_json


def load_script():
    spec = importlib.util.spec_from_file_location("mlm_plateau", SCRIPTS / "mlm_plateau.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_batches_are_masked_as_bert_masks():
    script = load_script()
    inputs, labels = script.batch(torch.Generator().manual_seed(0), 256, 128)
    targets = labels != -100
    assert abs(targets.float().mean().item() - 0.15 * 127 / 128) < 0.005 and not targets[:, 0].any()
    masked = (inputs == 1) & targets
    unchanged = (inputs == labels) & targets
    assert abs(masked.sum().item() / targets.sum().item() - 0.8) < 0.02
    assert abs(unchanged.sum().item() / targets.sum().item() - 0.1 - 0.1 / script.WORDS) < 0.02
    # Each word follows the previous one in the cycle: context decides every token.
    words = labels[targets]
    assert ((words >= script.SPECIAL) & (words < script.SPECIAL + script.WORDS)).all()


@pytest.mark.slow
def test_bert_init_stays_on_the_plateau_where_a_larger_one_leaves_it():
    pytest.importorskip("transformers")
    result = run_json("mlm_plateau.py", "--steps", 400, "--every", 400, "--ranges", 0.02, 0.1)
    final = {run["initializer_range"]: run["curve"][-1]["masked_accuracy"] for run in result["runs"]}
    assert result["no_context_accuracy"] == pytest.approx(0.115)
    assert final[0.1] > 0.9 and final[0.02] < 0.5
