"""scripts/demo.py (make demo) runs end to end, shortened: pretraining, fine-tuning from it and from random weights
of the same architecture, and its summary."""

import json

import pytest
from safetensors.torch import load_file

from tests.scripts import run_script


@pytest.mark.slow
def test_demo_prints_the_curve_and_both_fine_tunings(tmp_path):
    run = tmp_path / "demo"
    out = run_script("demo.py", run, "--pretrain-steps", 4, "--finetune-epochs", 0.05, cwd=tmp_path)
    assert "from the pretrained model" in out and "from random weights" in out and "gain from pretraining" in out
    summary = json.loads((run / "demo_summary.json").read_text())
    curve = summary["pretraining"]["curve"]
    assert [r["step"] for r in curve] == [4] and 0 < summary["pretraining"]["mlm_unigram_baseline"] < 0.2
    # NSP beside the majority label of the very pairs: more than half are random next segments, as in BERT's data.
    majority = summary["pretraining"]["nsp_majority_class"]
    assert set(majority) == {"train", "validation"} and all(0.5 <= v < 0.75 for v in majority.values())
    assert 0 <= curve[0]["eval_nsp_accuracy"] <= 1 and 0 <= curve[0]["train_nsp_accuracy"] <= 1
    assert "NSP held-out" in out and f"{majority['validation']:.3f} held out" in out
    assert set(summary["sst2_dev_accuracy"]) == {"pretrained", "random_init"}
    # The random copy has the pretrained model's architecture and tokenizer, not its weights.
    pretrained = load_file(run / "pretrain" / "checkpoints" / "last" / "model.safetensors")
    fresh = load_file(run / "random_init" / "checkpoints" / "step_0" / "model.safetensors")
    assert pretrained.keys() == fresh.keys()
    assert any(not (pretrained[k] == fresh[k]).all() for k in pretrained)
    tokenizer = (run / "random_init" / "checkpoints" / "step_0" / "tokenizer.json").read_text()
    assert tokenizer == (run / "pretrain" / "checkpoints" / "last" / "tokenizer.json").read_text()
