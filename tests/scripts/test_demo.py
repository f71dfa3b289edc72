"""scripts/demo.py (make demo) runs end to end, shortened: pretraining, fine-tuning from it and from random weights
of the same architecture, and its summary; its commands run with the arithmetic pinned (threads, AVX2)."""

import importlib.util
import json

import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file

from tests.scripts import SCRIPTS, run_script


def load_demo():
    spec = importlib.util.spec_from_file_location("demo", SCRIPTS / "demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("capability", "pinned"), [("AVX512", True), ("AVX2", True), ("DEFAULT", False)])
def test_the_demo_pins_avx2_where_the_cpu_has_it(monkeypatch, capsys, capability, pinned):
    demo = load_demo()
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    environment = demo.pinned_environment()
    if pinned:
        assert {k: environment[k] for k in demo.PINNED} == {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"}
        assert capsys.readouterr().out == ""
    else:
        assert environment is None and "figures will differ from README's" in capsys.readouterr().out


@pytest.mark.slow
def test_demo_prints_the_curve_and_both_fine_tunings(tmp_path):
    run = tmp_path / "demo"
    out = run_script(
        "demo.py", run, "--pretrain-steps", 4, "--finetune-epochs", 0.05, "--finetune-sentences", 100, cwd=tmp_path
    )
    assert "from the pretrained model" in out and "from random weights" in out and "gain from pretraining" in out
    summary = json.loads((run / "demo_summary.json").read_text())
    curve = summary["pretraining"]["curve"]
    # The last evaluation is in the second phase, at 128 tokens a sequence.
    assert [(r["step"], r["max_seq_len"]) for r in curve] == [(4, 128)]
    # Without context: the 10% of targets left unchanged are copied, the rest get the most frequent token.
    baseline = summary["pretraining"]["mlm_no_context_baseline"]
    assert baseline["unchanged"] == pytest.approx(0.1)
    assert baseline["accuracy"] == pytest.approx(0.1 + 0.9 * baseline["most_frequent_token"])
    assert 0.01 < baseline["most_frequent_token"] < 0.2 and f"{baseline['accuracy']:.3f}" in out
    # NSP beside the majority label of the very pairs, per phase length: more than half are random next segments,
    # the more so the shorter the sequences (a chunk of one long sentence always gets one, as in BERT's data).
    majority = summary["pretraining"]["nsp_majority_label"]
    assert set(majority) == {"train", "validation"} and all(set(m) == {"32", "128"} for m in majority.values())
    assert all(0.5 <= m["128"] < m["32"] < 0.95 for m in majority.values())
    assert 0 <= curve[0]["eval_nsp_accuracy"] <= 1 and 0 <= curve[0]["train_nsp_accuracy"] <= 1
    assert "NSP held-out" in out and f"({majority['validation']['128']:.3f})" in out
    for scores in (summary["pos_dev_accuracy"], summary["pos_dev_oov_accuracy"]):
        assert set(scores) == {"pretrained", "random_init"} and all(0 <= v <= 1 for v in scores.values())
    # The random copy has the pretrained model's architecture and tokenizer, not its weights.
    pretrained = load_file(run / "pretrain" / "checkpoints" / "last" / "model.safetensors")
    fresh = load_file(run / "random_init" / "checkpoints" / "step_0" / "model.safetensors")
    assert pretrained.keys() == fresh.keys()
    assert any(not (pretrained[k] == fresh[k]).all() for k in pretrained)
    # Drawn as BERT draws them (std 0.02), not with the demo pretraining's 0.05.
    assert fresh["embeddings.word_embeddings.weight"].std().item() == pytest.approx(0.02, rel=0.05)
    # Two threads, whatever the machine's cores (the rounding of float sums depends on it).
    assert OmegaConf.load(run / "pretrain" / "checkpoints" / "last" / "config.yaml").hardware.num_threads == 2
    assert OmegaConf.load(run / "pos" / ".hydra" / "config.yaml").hardware.num_threads == 2
    tokenizer = (run / "random_init" / "checkpoints" / "step_0" / "tokenizer.json").read_text()
    assert tokenizer == (run / "pretrain" / "checkpoints" / "last" / "tokenizer.json").read_text()
