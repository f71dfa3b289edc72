"""Bad inputs of Chinese whole-word masking through the real command line (plm-train): a word segmenter with a
masking that masks no words, a segmenter that does not exist, and jieba missing, each get exit status 1 and one
line on stderr starting ``error:`` that names the key, before any data is read. Uses test_bad_inputs.py's harness."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from plm_toolkit.core.resources import resource_path
from tests.bad_inputs.test_bad_inputs import Case, assert_one_error_line, command_line

ZH = ("model=bert_tiny", "data=text_files", f"data.train_files=[{resource_path('corpora/zh/train.txt')}]",
      "data.cache_dir={tmp}/cache", "trainer.max_steps=1", "trainer.progress_bar=false",
      "trainer.tensorboard=false", "hardware=cpu")  # fmt: skip

CASES = [
    Case("segmenter_without_whole_word", "train", ("objective=mlm", "objective.word_segmenter=jieba"), "objective.word_segmenter=jieba finds the words that whole-word masking masks, but objective.masking=token; set objective.masking=whole_word", base=ZH),
    Case("unknown_segmenter", "train", ("objective=mlm_sop", "objective.masking=whole_word", "objective.word_segmenter=thulac"), "objective.word_segmenter=thulac: Invalid value 'thulac', expected one of [regex, jieba]", base=ZH),
    Case("jieba_not_installed", "train", ("objective=mlm_nsp", "objective.masking=whole_word", "objective.word_segmenter=jieba"), "objective.word_segmenter=jieba needs the jieba package: pip install 'plm_toolkit[zh]'", base=ZH),
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_chinese_input_gets_one_line(case, tmp_path):
    env = {**os.environ, "TQDM_DISABLE": "1"}
    env.pop("HYDRA_FULL_ERROR", None)
    if case.name == "jieba_not_installed":  # an importable jieba that fails, as where the package is absent
        shadow = tmp_path / "shadow"
        shadow.mkdir()
        (shadow / "jieba.py").write_text("raise ImportError('No module named jieba')\n")
        env["PYTHONPATH"] = os.pathsep.join([str(shadow), env.get("PYTHONPATH", "")])
    places = {"tmp": str(tmp_path), "run": str(tmp_path / "run")}
    done = subprocess.run(
        command_line(case, places), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert_one_error_line(case, {"done": done, "places": places})
    assert not Path(tmp_path / "cache").exists(), "refused before any data is read"
