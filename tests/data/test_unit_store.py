"""ERNIE's knowledge units in the token store: plm-prepare accepts objective=knowledge_masking, and a killed
preparation (phrases learned, some shards written) resumes to the store a fresh one writes."""

import json
import os
import subprocess
import sys

import pytest

from plm_toolkit.data.store.preparation import prepare_store
from plm_toolkit.data.store.shard_worker import KILL_AFTER
from plm_toolkit.data.store.token_store import TokenStore
from plm_toolkit.objectives.knowledge_masking import KnowledgeMaskingConfig
from tests.data.test_store import config, shard_digests, write_corpus


@pytest.mark.slow
def test_a_killed_preparation_of_units_resumes_to_the_same_store(tmp_path):
    corpus = write_corpus(tmp_path)
    gazetteer = tmp_path / "gazetteer.txt"
    gazetteer.write_text("second line\nDocument 7\n", encoding="utf-8")
    units = KnowledgeMaskingConfig(entity_gazetteer=str(gazetteer), collocation_min_count=3, collocation_threshold=10.0)
    fields = {"shard_bytes": 4096, "num_proc": 1}
    fresh = prepare_store(config(tmp_path, [corpus], store=str(tmp_path / "fresh"), **fields), "units", units=units)
    overrides = [
        "model=ernie",
        "data=text_files",
        f"data.train_files=[{corpus}]",
        f"data.cache_dir={tmp_path / 'cache'}",
        "data.tokenizer.kind=character",
        "data.tokenizer.vocab_size=120",
        f"objective.entity_gazetteer={gazetteer}",
        "objective.collocation_min_count=3",
        "objective.collocation_threshold=10",
        *(f"data.{k}={v}" for k, v in fields.items()),
    ]
    command = [sys.executable, "-m", "plm_toolkit.commands.prepare", *overrides, f"data.store={tmp_path / 'killed'}"]
    killed = subprocess.run(command, cwd=tmp_path, env={**os.environ, KILL_AFTER: "2"}, capture_output=True)
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    assert (tmp_path / "killed" / "phrases.txt").is_file() and not (tmp_path / "killed" / "manifest.json").exists()
    assert len(list((tmp_path / "killed" / "train").glob("*.idx"))) == 2
    resumed = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    summary = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert summary["unit"] == "units" and summary["examples"]["layout"] == "full_sentences"
    written = {k: v for k, v in shard_digests(tmp_path / "killed").items() if not k.startswith("layouts/")}
    assert written == shard_digests(fresh) and "phrases.txt" in written  # the shards, their unit counts, phrases
    counts = TokenStore(fresh).manifest["splits"]["train"]["units"]
    assert counts["entities"] == 60 + 1 and counts["phrases"] > 0  # every "second line", and "Document 7"
    assert TokenStore(tmp_path / "killed").manifest["splits"] == TokenStore(fresh).manifest["splits"]
