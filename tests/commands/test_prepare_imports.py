"""plm-prepare only tokenizes: a real run of it imports nothing of the training code (the loop, optimizers,
precision, process groups), which is what keeps it light enough to run on a data node."""

from __future__ import annotations

import json
import subprocess
import sys

from plm_toolkit.core.resources import resource_path

RUN_AND_LIST = """
import json, sys
sys.argv = ["plm-prepare", *json.loads(sys.argv[1])]
from plm_toolkit.commands.prepare import main
try:
    main()
except SystemExit as stopped:
    if stopped.code:
        raise
print(json.dumps(sorted(m for m in sys.modules if m.startswith("plm_toolkit."))))
"""


def test_plm_prepare_imports_no_training_module(tmp_path):
    overrides = [
        "model=gpt2",
        "data=text_files",
        f"data.train_files=[{resource_path('corpora/wikitext2/valid.txt')}]",
        f"data.store={tmp_path / 'store'}",
        f"data.cache_dir={tmp_path / 'cache'}",
        "data.tokenizer.kind=character",
        "data.tokenizer.vocab_size=200",
        "data.num_proc=1",
    ]
    done = subprocess.run(
        [sys.executable, "-c", RUN_AND_LIST, json.dumps(overrides)], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    summary, imported = (json.loads(line) for line in done.stdout.strip().splitlines()[-2:])
    assert summary["splits"]["train"]["tokens"] > 0
    assert "plm_toolkit.commands.prepare" in imported and "plm_toolkit.data.store.preparation" in imported
    assert [m for m in imported if m.startswith("plm_toolkit.training")] == []
