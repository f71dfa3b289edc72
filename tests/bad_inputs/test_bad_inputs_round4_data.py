"""The fourth round of bad inputs, through the real command line (test_bad_inputs.py's harness): readers (a Parquet
file of dictionary-encoded strings is text; one without rows or text, a JSONL file without text, each named in its
own format's words; an empty or too short nanoGPT file named with data.store), and advice that works when followed:
a damaged store is refused naming plm-prepare, which then repairs it (the shards that check out kept, the result
the store as it was); a store prepared with other settings or files is refused with a way out that works. Besides:
a vocabulary smaller than asked says why, for a blend's sources and for a corpus too small.
"""

# The table of cases reads best one case a line, as in test_bad_inputs.py.
# ruff: noqa: E501
from __future__ import annotations

import json
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from plm_toolkit.data.store.token_store import Shard
from tests.bad_inputs.test_bad_inputs import Case, assert_one_error_line, command_line
from tests.bad_inputs.test_bad_inputs_formats import gpt2_style_tokenizer
from tests.bad_inputs.test_bad_inputs_round3 import quiet_env
from tests.bad_inputs.test_bad_inputs_store import CORPUS, GPT

STORE = (*GPT, "data.train_files=[{tmp}/corpus.txt]", "data.store={tmp}/store")
TOKENIZER = "data.tokenizer.path={tmp}/tokenizer.json"
DAMAGED = "the token store {tmp}/store is damaged; plm-prepare with the overrides that prepared it repairs it (the shards that check out are kept)"
ANOTHER = "prepare a store for this run in another folder (plm-prepare with its overrides and a new data.store)"

CASES = [
    # --- readers ---------------------------------------------------------------------------------------------------
    Case("parquet_without_row_groups", "prepare", (*GPT, "data.train_files=[{tmp}/no_row_groups.parquet]", "data.store={tmp}/s"), "Parquet file {tmp}/no_row_groups.parquet holds no rows (0 row groups); expected one document per row in column 'text' (data.text_column)"),
    Case("parquet_rows_without_text", "prepare", (*GPT, "data.train_files=[{tmp}/blank.parquet]", "data.store={tmp}/s"), "Parquet file {tmp}/blank.parquet has no text: its 3 row(s) are empty in column 'text' (data.text_column)"),
    Case("jsonl_rows_without_text", "prepare", (*GPT, "data.train_files=[{tmp}/blank.jsonl]", "data.store={tmp}/s"), "JSONL file {tmp}/blank.jsonl has no text; expected one JSON object a line with text in its field 'text' (data.text_column)"),
    Case("nanogpt_empty", "train", ("data.store={tmp}/empty/train.bin", TOKENIZER), "{tmp}/empty/train.bin is empty (0 bytes); nanoGPT's .bin holds uint16 token ids", base=GPT),
    Case("nanogpt_shorter_than_a_window", "train", ("data.store={tmp}/short/train.bin", TOKENIZER), "data.store={tmp}/short/train.bin: the corpus has 10 tokens, fewer than one window of 33", base=GPT),
    Case("nanogpt_validation_shorter_than_a_window", "train", ("data.store={tmp}/short_val/train.bin", TOKENIZER), "data.store={tmp}/short_val/train.bin, its validation file {tmp}/short_val/val.bin: the corpus has 5 tokens, fewer than one window of 33", base=GPT),
    # --- advice that works -----------------------------------------------------------------------------------------
    Case("store_manifest_cut_short", "train", ("data.store={tmp}/store",), "{tmp}/store/manifest.json does not parse: " + DAMAGED, base=GPT),
    Case("store_manifest_not_a_manifest", "train", ("data.store={tmp}/store",), "{tmp}/store/manifest.json lacks settings, splits, vocab_size, fingerprint: " + DAMAGED, base=GPT),
    Case("store_index_header_damaged", "train", ("data.store={tmp}/store",), "{tmp}/store/train/00001.idx is truncated (its header does not parse): " + DAMAGED, base=GPT),
    Case("store_other_settings", "prepare", (*STORE, "data.tokenizer.vocab_size=90"), "data.store={tmp}/store was prepared with data.tokenizer.vocab_size=100, this run asks for 90: " + ANOTHER + ", or leave data.store unset"),
    Case("store_other_files", "train", ("data.store={tmp}/store", "data.train_files=[{tmp}/other.txt]"), "the run trains on the store: drop data.train_files, or " + ANOTHER, base=GPT),
]  # fmt: skip


def run(command: str, args: tuple[str, ...], tmp: Path, run_dir: str = "run") -> subprocess.CompletedProcess:
    """plm-prepare with ``args``, or plm-train with ``args`` after GPT's, in ``tmp``."""
    places = {"tmp": str(tmp), "run": str(tmp / run_dir)}
    return subprocess.run(command_line(Case("x", command, args, "", base=GPT), places), cwd=tmp, env=quiet_env(),
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def setup(name: str, tmp: Path, prepared: Path) -> None:
    (tmp / "corpus.txt").write_text(CORPUS, encoding="utf-8")
    (tmp / "other.txt").write_text("Another document.\n", encoding="utf-8")
    gpt2_style_tokenizer(tmp / "tokenizer.json")
    writer = pq.ParquetWriter(tmp / "no_row_groups.parquet", pa.schema([("text", pa.string())]))
    writer.close()  # the schema, and not one row group
    pq.write_table(pa.table({"text": ["", "  ", None]}), tmp / "blank.parquet")
    (tmp / "blank.jsonl").write_text('{"text": ""}\n{"text": "\\n"}\n', encoding="utf-8")
    for folder, train, validation in (("empty", 0, None), ("short", 10, None), ("short_val", 100, 5)):
        (tmp / folder).mkdir()
        np.arange(10, 10 + train, dtype=np.uint16).tofile(tmp / folder / "train.bin")
        if validation is not None:
            np.arange(10, 10 + validation, dtype=np.uint16).tofile(tmp / folder / "val.bin")
    if name.startswith("store_"):
        shutil.copytree(prepared / "store", tmp / "store")
        shutil.copyfile(prepared / "corpus.txt", tmp / "corpus.txt")  # the size and time the store records
        shutil.copystat(prepared / "corpus.txt", tmp / "corpus.txt")
        for row in (manifest := json.loads((tmp / "store" / "manifest.json").read_text()))["splits"]["train"][
            "sources"
        ]:
            row["path"] = str(tmp / "corpus.txt")
        (tmp / "store" / "manifest.json").write_text(json.dumps(manifest))
    damage(name, tmp / "store")


def damage(name: str, store: Path) -> None:
    """A finished store damaged one way (as a disk, a copy cut short or a stray edit would)."""
    if name == "store_manifest_cut_short":
        text = (store / "manifest.json").read_text()
        (store / "manifest.json").write_text(text[: len(text) // 2])
    if name == "store_manifest_not_a_manifest":
        (store / "manifest.json").write_text("{}\n")
    if name == "store_index_header_damaged":
        index = store / "train" / "00001.idx"
        index.write_bytes(index.read_bytes()[:30])
    if name == "store_shard_bytes_flipped":
        shard = store / "train" / "00002.bin"
        data = bytearray(shard.read_bytes())
        data[6:10] = bytes(b ^ 0x01 for b in data[6:10])
        shard.write_bytes(bytes(data))
    if name == "store_tokenizer_replaced":
        tokenizer = json.loads((store / "tokenizer.json").read_text())
        tokenizer["added_tokens"] = tokenizer["added_tokens"][:-1]
        (store / "tokenizer.json").write_text(json.dumps(tokenizer))


@pytest.fixture(scope="session")
def prepared(tmp_path_factory) -> Path:
    """A finished store of CORPUS (3 shards) that the store cases copy."""
    root = tmp_path_factory.mktemp("bad_inputs_round4")
    (root / "corpus.txt").write_text(CORPUS, encoding="utf-8")
    done = run("prepare", STORE, root)
    assert done.returncode == 0, done.stderr[-2000:]
    return root


@pytest.fixture(scope="session")
def outcomes(prepared) -> dict[str, dict]:
    def one(case: Case) -> tuple[str, dict]:
        tmp = prepared / case.name
        tmp.mkdir()
        setup(case.name, tmp, prepared)
        places = {"tmp": str(tmp), "run": str(tmp / "run")}
        done = subprocess.run(command_line(case, places), cwd=tmp, env=quiet_env(), capture_output=True, text=True,
                              timeout=300)  # fmt: skip
        return case.name, {"done": done, "places": places}

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, CASES))


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_round4_gets_one_line(case, outcomes):
    assert_one_error_line(case, outcomes[case.name])


@pytest.mark.slow
def test_a_parquet_column_of_dictionary_encoded_strings_is_read_as_text(tmp_path):
    """The same store, token for token, from the column dictionary-encoded and plain (and as large strings)."""
    texts = [f"Document {k} is about cats and mats." for k in range(60)] * 2
    pq.write_table(pa.table({"text": pa.array(texts).dictionary_encode()}), tmp_path / "dictionary.parquet")
    pq.write_table(pa.table({"text": pa.array(texts, pa.large_string())}), tmp_path / "large.parquet")
    pq.write_table(pa.table({"text": texts}), tmp_path / "plain.parquet")
    assert pa.types.is_dictionary(pq.ParquetFile(tmp_path / "dictionary.parquet").schema_arrow.field("text").type)
    tokens = {}
    for name in ("dictionary", "large", "plain"):
        done = run(
            "prepare", (*GPT, f"data.train_files=[{{tmp}}/{name}.parquet]", f"data.store={{tmp}}/{name}"), tmp_path
        )
        assert done.returncode == 0, done.stderr[-2000:]
        tokens[name] = [(tmp_path / name / "train" / f).read_bytes() for f in ("00000.bin",)]
        assert json.loads(done.stdout.splitlines()[-1])["splits"]["train"]["documents"] == 120
    assert tokens["dictionary"] == tokens["plain"] == tokens["large"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["store_manifest_cut_short", "store_index_header_damaged", "store_shard_bytes_flipped",
                                  "store_tokenizer_replaced"])  # fmt: skip
def test_the_advice_for_a_damaged_store_works(prepared, tmp_path, name):
    """plm-train refuses the damaged store naming plm-prepare; plm-prepare with the same overrides repairs it, saying
    what it kept; the repaired store holds the bytes it held before the damage, and plm-train trains on it."""
    setup(name, tmp_path, prepared)
    refused = run("train", ("data.store={tmp}/store",), tmp_path)
    assert refused.returncode == 1 and "is damaged; plm-prepare with the overrides that prepared it" in refused.stderr
    repaired = run("prepare", STORE, tmp_path)
    assert repaired.returncode == 0, repaired.stderr[-2000:]
    kept = {"store_index_header_damaged": "2 of 3 shards kept", "store_shard_bytes_flipped": "2 of 3 shards kept"}
    assert (
        f"the token store {tmp_path}/store is damaged; repairing it: {kept.get(name, 'preparing it afresh')}"
        in repaired.stderr
    )
    assert (tmp_path / "store" / "tokenizer.json").read_bytes() == (prepared / "store" / "tokenizer.json").read_bytes()
    for number in range(3):  # the same ids, documents and checksums (the index also names this copy's corpus file)
        ours, theirs = (Shard.open(folder / "store" / "train" / f"{number:05d}") for folder in (tmp_path, prepared))
        assert np.array_equal(ours.ids, theirs.ids) and ours.header["ids_crc32"] == theirs.header["ids_crc32"]
        assert np.array_equal(ours.array("document_ends"), theirs.array("document_ends"))
    trained = run("train", ("data.store={tmp}/store",), tmp_path, "run2")
    assert trained.returncode == 0, trained.stderr[-2000:]


@pytest.mark.slow
def test_the_advice_for_a_store_of_other_settings_works(prepared, tmp_path):
    """'prepare a store for this run in another folder': plm-prepare there with the run's overrides, then the run."""
    setup("store_other_settings", tmp_path, prepared)
    other = ("data.tokenizer.vocab_size=90", "data.store={tmp}/store90")
    done = run("prepare", (*STORE, *other), tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    trained = run("train", other, tmp_path)
    assert trained.returncode == 0, trained.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("blend", [False, True])
def test_a_vocabulary_smaller_than_asked_says_why(tmp_path, blend):
    """data.tokenizer.train_sample_bytes=1 (a sample of a document or so), and a whole corpus too small for the size
    asked: one warning line each with both sizes and the cause, for plain files and for a blend's sources."""
    (tmp_path / "corpus.txt").write_text(CORPUS * 3, encoding="utf-8")
    words = ("data.tokenizer.kind=wordpiece", "data.tokenizer.vocab_size=600")
    files = (
        ("data.sources=[{{name:a,files:[{tmp}/corpus.txt],weight:1}}]",)
        if blend
        else ("data.train_files=[{tmp}/corpus.txt]",)
    )
    for sample, why in (("1", "from its sample of 1 bytes (data.tokenizer.train_sample_bytes) of the 0.1 MB of training text; raise train_sample_bytes"),
                        ("100000000", "the whole training text (0.06 MB) gives no more pieces seen data.tokenizer.min_frequency=")):  # fmt: skip
        done = run("prepare", (*GPT, *words, *files, f"data.tokenizer.train_sample_bytes={sample}",
                               f"data.cache_dir={{tmp}}/cache{sample}"), tmp_path)  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        learned = [line for line in done.stderr.splitlines() if "the vocabulary learned only" in line]
        assert len(learned) == 1 and "data.tokenizer.vocab_size=600: the vocabulary learned only " in learned[0]
        assert why in learned[0], learned[0]
