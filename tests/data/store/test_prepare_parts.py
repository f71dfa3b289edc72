"""One token store prepared across nodes (data/store/parts.py): the shards dealt out by size, each part
tokenizing its own, the last to finish writing the manifest, and the store the same as one node's. Two local jobs of
Hydra's submitit launcher (the one plm-train uses on SLURM) stand for two nodes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from plm_toolkit.core.data_schema import DataConfig
from plm_toolkit.core.errors import ConfigError
from plm_toolkit.data.store.parts import deal_pieces, prepare_part
from plm_toolkit.data.store.preparation import prepare_store
from plm_toolkit.data.store.token_store import TokenStore


def corpus(folder: Path) -> Path:
    path = folder / "corpus.txt"
    if path.is_file():
        return path
    lines = [f"Line {k} of the corpus says {'something ' * (k % 7)}and ends." for k in range(3000)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def data_config(folder: Path, store: str, **more) -> DataConfig:
    values = {"train_files": [str(corpus(folder))], "store": str(folder / store), "cache_dir": str(folder / "cache"),
              "num_proc": 1, "shard_bytes": 8192, "document_boundary": "line",
              "tokenizer": {"kind": "wordpiece", "vocab_size": 300}, **more}  # fmt: skip
    return OmegaConf.merge(OmegaConf.structured(DataConfig), values)


def test_pieces_are_dealt_by_size_once_each():
    sizes = [900, 100, 800, 300, 300, 700, 50]
    plan = {"pieces": {"train": [{"start": 0, "end": s} for s in sizes], "validation": [{"start": 0, "end": 400}]}}
    dealt = deal_pieces(plan, 3)
    assert sorted(p for part in dealt for p in part) == [*(("train", k) for k in range(7)), ("validation", 0)]
    loads = [sum(plan["pieces"][s][n]["end"] for s, n in part) for part in dealt]
    assert max(loads) - min(loads) <= max(sizes)
    assert deal_pieces(plan, 3) == dealt


def test_two_parts_make_the_store_one_process_makes(tmp_path):
    folder, finished = prepare_part(data_config(tmp_path, "parts"), "documents", False, None, 0, 2)
    assert not finished and not (folder / "manifest.json").exists()
    assert (
        0
        < len(list((folder / "train").glob("*.idx")))
        < json.loads((folder / "plan.json").read_text()).get("pieces")["train"].__len__()
    )
    with pytest.raises(ConfigError) as other:  # its deal of the shards would differ: no part would see them all
        prepare_part(data_config(tmp_path, "parts"), "documents", False, None, 1, 3)
    assert str(other.value).startswith(
        f"data.prepare_parts=3: the token store {folder} is being prepared in data.prepare_parts=2 parts"
    )
    folder, finished = prepare_part(data_config(tmp_path, "parts"), "documents", False, None, 1, 2)
    assert finished and (folder / "manifest.json").exists() and not (folder / "plan.json").exists()
    assert not (folder / "prepare_parts.json").exists()
    tokenizer = str(folder / "tokenizer.json")
    single = prepare_store(data_config(tmp_path, "single", tokenizer={"path": tokenizer}), "documents")
    parts, one = TokenStore(folder).manifest["splits"]["train"], TokenStore(single).manifest["splits"]["train"]
    assert parts["shards"] > 4 and {k: parts[k] for k in ("sha256", "tokens", "documents", "shards")} == {
        k: one[k] for k in ("sha256", "tokens", "documents", "shards")
    }
    with pytest.raises(ConfigError, match="data.prepare_part=2: expected 0 to data.prepare_parts - 1 = 1"):
        prepare_part(data_config(tmp_path, "parts"), "documents", False, None, 2, 2)


@pytest.mark.slow
def test_two_submitit_jobs_prepare_one_store(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    path = corpus(tmp_path)
    store = tmp_path / "store"
    command = [
        sys.executable, "-m", "plm_toolkit.commands.prepare", "-m", "hydra/launcher=submitit_local",
        f"hydra.sweep.dir={tmp_path / 'sweep'}", "model=bert_tiny", "objective=mlm", "data=text_files",
        f"data.train_files=[{path}]", f"data.store={store}", f"data.cache_dir={tmp_path / 'cache'}", "data.num_proc=1",
        "data.shard_bytes=8192", "data.document_boundary=line", "data.tokenizer.vocab_size=300",
        "data.prepare_parts=2", "data.prepare_part=0,1",
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    logs = [p.read_text() for p in (tmp_path / "sweep").rglob("*_log.out")]
    outputs = [json.loads(line) for text in logs for line in text.splitlines() if line.startswith("{")]
    assert len(outputs) == 2
    finished = [o for o in outputs if o.get("finished", True)]
    assert finished and finished[0]["splits"]["train"]["shards"] > 4  # the last part wrote the manifest
    assert TokenStore(store).manifest["splits"]["train"]["tokens"] == finished[0]["splits"]["train"]["tokens"]
