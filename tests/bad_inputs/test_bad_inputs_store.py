"""Bad inputs of the token store through the real command line (plm-prepare, plm-train): exit status 1, one line on
stderr starting ``error:`` that names the file, line, offset or key, no traceback, and no half-written file left
behind (a shard is whole under its name, or absent). Uses test_bad_inputs.py's harness (its command lines)."""

from __future__ import annotations

import gzip
import json
import os
import resource
import signal
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from plm_toolkit.data.store.shard_worker import KILL_AFTER
from plm_toolkit.data.store.token_store import Shard
from tests.bad_inputs.test_bad_inputs import Case, assert_one_error_line, command_line

CORPUS = "".join(f"Document {k} starts.\nIts second line; number {k}.\n\n" for k in range(400))
GPT = ("model=gpt2", "model.hidden_size=32", "model.num_layers=1", "model.num_heads=2", "model.intermediate_size=37",
       "model.max_position_embeddings=64", "data=text_files", "data.max_seq_len=32", "data.tokenizer.kind=character",
       "data.tokenizer.vocab_size=100", "data.cache_dir={tmp}/cache", "data.shard_bytes=8192", "data.num_proc=1",
       "trainer.max_steps=1", "trainer.progress_bar=false", "trainer.tensorboard=false", "hardware=cpu")  # fmt: skip


@dataclass(frozen=True)
class StoreCase:
    case: Case
    # Builds the case's inputs in its folder (and may prepare a store there).
    setup: str = "corpus"
    # Limit on the size of any file the command writes (a disk that fills up), in bytes.
    file_limit: int | None = None


CASES = [
    StoreCase(Case("store_other_settings", "train", ("data.store={tmp}/store", "data.tokenizer.vocab_size=90"), "data.store={tmp}/store was prepared with data.tokenizer.vocab_size=100, this run asks for 90", base=GPT), "store"),
    StoreCase(Case("store_other_unit", "train", ("data.store={tmp}/store", "model=bert_tiny", "objective=mlm_nsp"), "data.store={tmp}/store holds documents tokenized whole, as written (streams); this run needs sentences tokenized one by one", base=GPT), "store"),
    StoreCase(Case("store_shard_missing", "train", ("data.store={tmp}/store",), "token store shard {tmp}/store/train/00001.bin is missing", base=GPT), "missing_shard"),
    StoreCase(Case("store_shard_truncated", "train", ("data.store={tmp}/store",), "token store shard {tmp}/store/train/00000.bin is truncated (100 bytes, expected", base=GPT), "truncated_shard"),
    StoreCase(Case("store_not_a_store", "train", ("data.store={tmp}/other",), "data.store={tmp}/other holds other files; remove it or give another folder", base=GPT), "other_folder"),
    StoreCase(Case("corpus_changed_during_preparation", "prepare", (*GPT, "data.train_files=[{tmp}/corpus.txt]", "data.store={tmp}/store"), "corpus file {tmp}/corpus.txt changed since the preparation of data.store={tmp}/store began"), "killed_then_changed"),
    StoreCase(Case("corpus_disk_full", "prepare", (*GPT, "data.train_files=[{tmp}/corpus.txt]", "data.store={tmp}/store"), "no space left writing token store shard {tmp}/store/train/00000.bin (File too large)"), file_limit=12_000),
    StoreCase(Case("gzip_corrupt_member", "prepare", (*GPT, "data.train_files=[{tmp}/corpus.txt.gz]", "data.store={tmp}/store"), "{tmp}/corpus.txt.gz: corrupt gzip data near compressed byte offset"), "corrupt_gzip"),
    StoreCase(Case("jsonl_row_without_text", "prepare", (*GPT, "data.train_files=[{tmp}/rows.jsonl]", "data.store={tmp}/store"), "{tmp}/rows.jsonl:3: no 'text' field (data.text_column) in the row; it has ['body', 'id']"), "jsonl"),
    StoreCase(Case("jsonl_row_not_json", "prepare", (*GPT, "data.train_files=[{tmp}/broken.jsonl]", "data.store={tmp}/store"), "{tmp}/broken.jsonl:2: not a JSON object"), "jsonl"),
    StoreCase(Case("glob_matches_nothing", "prepare", (*GPT, "data.train_files=[{tmp}/nothing/*.txt]", "data.store={tmp}/store"), "data.train_files: the pattern {tmp}/nothing/*.txt matches no file")),
]  # fmt: skip


def prepare(tmp: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    args = (*GPT, f"data.train_files=[{tmp}/corpus.txt]", f"data.store={tmp}/store", *extra)
    command = command_line(Case("setup", "prepare", args, ""), {"tmp": str(tmp)})
    return subprocess.run(command, cwd=tmp, env={**os.environ, **(env or {})}, capture_output=True, text=True)


def setup(name: str, tmp: Path) -> None:
    (tmp / "corpus.txt").write_text(CORPUS, encoding="utf-8")
    if name in ("store", "missing_shard", "truncated_shard"):
        assert prepare(tmp).returncode == 0
    if name == "missing_shard":
        (tmp / "store" / "train" / "00001.bin").unlink()
    if name == "truncated_shard":
        os.truncate(tmp / "store" / "train" / "00000.bin", 100)
    if name == "other_folder":
        (tmp / "other").mkdir()
        (tmp / "other" / "notes.txt").write_text("mine\n")
    if name == "killed_then_changed":  # a preparation killed halfway, then the file grows before it resumes
        assert prepare(tmp, env={KILL_AFTER: "1"}).returncode == -signal.SIGKILL
        with open(tmp / "corpus.txt", "a", encoding="utf-8") as f:
            f.write("A late document.\n")
    if name == "corrupt_gzip":
        data = bytearray(gzip.compress(CORPUS.encode() * 20))
        data[len(data) // 2 : len(data) // 2 + 64] = bytes(64)
        (tmp / "corpus.txt.gz").write_bytes(bytes(data))
    if name == "jsonl":
        rows = [{"text": "One.", "id": 1}, {"text": "Two.", "id": 2}, {"body": "Three.", "id": 3}]
        (tmp / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        (tmp / "broken.jsonl").write_text('{"text": "One."}\n{"text": "Two.\n', encoding="utf-8")


def limited(size: int | None):
    def apply() -> None:
        if size is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG
            resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

    return apply


@pytest.fixture(scope="session")
def outcomes(tmp_path_factory) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("bad_store_inputs")
    env = {**os.environ, "TQDM_DISABLE": "1"}
    env.pop("HYDRA_FULL_ERROR", None)

    def one(store_case: StoreCase) -> tuple[str, dict]:
        case = store_case.case
        tmp = root / case.name
        tmp.mkdir()
        setup(store_case.setup, tmp)
        places = {"tmp": str(tmp), "run": str(tmp / "run")}
        done = subprocess.run(command_line(case, places), cwd=tmp, env=env, capture_output=True, text=True,
                              timeout=300, preexec_fn=limited(store_case.file_limit))  # fmt: skip
        return case.name, {"done": done, "places": places, "tmp": tmp}

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, CASES))


@pytest.mark.slow
@pytest.mark.parametrize("store_case", CASES, ids=[c.case.name for c in CASES])
def test_bad_store_input_gets_one_line_and_leaves_no_half_written_shard(store_case, outcomes):
    outcome = outcomes[store_case.case.name]
    assert_one_error_line(store_case.case, outcome)
    left = [p for p in outcome["tmp"].rglob("*") if p.name.endswith((".tmp", ".part")) or p.suffix == ".lock"]
    assert left == [], f"temporary files left behind: {left}"
    store = outcome["tmp"] / "store"
    if store_case.case.command == "prepare":  # every shard a failed preparation left under its name is whole
        for index in store.glob("*/*.idx"):
            Shard.open(index.with_suffix(""))
    if store_case.file_limit is not None:  # the disk has room again: the same command finishes the store
        command = command_line(store_case.case, outcome["places"])
        assert subprocess.run(command, cwd=outcome["tmp"], capture_output=True).returncode == 0
        assert (store / "manifest.json").is_file() and not list(store.glob("*/.*"))
