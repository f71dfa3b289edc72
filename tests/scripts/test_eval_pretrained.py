"""scripts/eval_pretrained.py reads pretraining checkpoints back with their run's validation data and prints one JSON
line each: masked-token accuracy, and for rtd the discriminator's accuracy on replaced and original tokens."""

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module

import plm_toolkit.commands.train as train
from plm_toolkit.core.resources import resource_path
from tests.scripts import run_script
from tests.training.conftest import TINY


@pytest.mark.slow
def test_masked_accuracy_and_replaced_token_detection(tmp_path):
    docs = Path(resource_path("corpora/wikitext2/train.txt")).read_text().split("\n\n")
    (tmp_path / "train.txt").write_text("\n\n".join(docs[:8])[:20000])
    (tmp_path / "valid.txt").write_text("\n\n".join(docs[20:22])[:4000])
    checkpoints = []
    for objective in ("mlm", "rtd"):
        overrides = [*TINY, f"objective={objective}", "data=text_files", "trainer.max_steps=2"]
        overrides += [
            f"data.train_files=[{tmp_path / 'train.txt'}]",
            f"data.validation_files=[{tmp_path / 'valid.txt'}]",
        ]
        with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
            cfg = compose("train", overrides=[*overrides, f"data.cache_dir={tmp_path / 'cache'}"])
        train.run(cfg, tmp_path / objective)
        checkpoints.append(tmp_path / objective / "checkpoints" / "last")
    mlm, rtd = (json.loads(line) for line in run_script("eval_pretrained.py", *checkpoints).splitlines())
    assert (mlm["objective"], mlm["step"], rtd["objective"], rtd["step"]) == ("mlm", 2, "rtd", 2)
    for result in (mlm, rtd):
        assert 0.0 <= result["mlm_accuracy"] <= 1.0 and result["parameters_backbone"] > 0
    assert "rtd_accuracy" not in mlm and 0.0 < rtd["replaced_share"] < 1.0
    # Every real token is either replaced or original: the overall accuracy is the two accuracies, weighted.
    share = rtd["replaced_share"]
    weighted = share * rtd["replaced_token_accuracy"] + (1 - share) * rtd["original_token_accuracy"]
    assert rtd["rtd_accuracy"] == pytest.approx(weighted, abs=1e-9)
