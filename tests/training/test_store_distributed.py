"""Data-parallel runs and the token store: ranks that find no store prepare it once (one takes its lock, the others
wait on the file system, in no collective), and two processes train from one store as one process does."""

import json
import subprocess
import sys

import pytest

from .conftest import GPT2_SMALL, QUIET, read_metrics
from .test_train import launch

GPT = [
    *(o for o in GPT2_SMALL if not o.startswith("trainer.batch_size")),
    "model.hidden_dropout=0",
    "model.attention_dropout=0",
    "model.embedding_dropout=0",
    "data=text_files",
    "data.tokenizer.kind=character",
    "data.shard_bytes=8192",
    *QUIET,
]


@pytest.mark.distributed
@pytest.mark.slow
def test_two_processes_train_from_one_store_as_one_process(small_corpus, tmp_path):
    corpus = [f"data.train_files=[{small_corpus['train']}]", f"data.cache_dir={tmp_path / 'cache'}"]
    # Two ranks and an empty cache: one prepares the store (and its tokenizer) while the other waits for it.
    two = launch([*GPT, *corpus, "trainer.max_steps=6", "trainer.batch_size=4", f"hydra.run.dir={tmp_path / 'two'}"],
                 tmp_path, nproc=2)  # fmt: skip
    assert two.returncode == 0, two.stderr[-3000:]
    stores = list((tmp_path / "cache" / "stores").iterdir())
    assert len([s for s in stores if not s.name.startswith(".")]) == 1
    # plm-prepare writes a store of its own; one process trains from it at the same global batch.
    store = tmp_path / "prepared"
    prepared = subprocess.run(
        [sys.executable, "-m", "plm_toolkit.commands.prepare", *GPT, *corpus, f"data.store={store}", "data.num_proc=2"],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert prepared.returncode == 0, prepared.stderr[-3000:]
    summary = json.loads(prepared.stdout.strip().splitlines()[-1])
    assert summary["store"] == str(store) and summary["splits"]["train"]["shards"] > 1
    # The corpus files are not named: the store is all the run reads.
    alone = [f"data.store={store}", "data.train_files=[]", f"data.cache_dir={tmp_path / 'c1'}"]
    one = launch(
        [*GPT, *alone, "trainer.max_steps=6", "trainer.batch_size=8", f"hydra.run.dir={tmp_path / 'one'}"], tmp_path
    )
    assert one.returncode == 0, one.stderr[-3000:]
    a, b = read_metrics(tmp_path / "one"), read_metrics(tmp_path / "two")
    assert [r["step"] for r in b] == list(range(1, 7))
    assert max(abs(x["loss"] - y["loss"]) for x, y in zip(a, b, strict=True)) < 1e-5
