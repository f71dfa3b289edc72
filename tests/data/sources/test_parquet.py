"""Parquet corpora (``data/sources/parquet.py``): a file's row groups become the preparation's pieces, the store holds
the same ids as from JSONL of the same text whatever the number of processes, null rows are skipped, and
plm-finetune's table readers read a Parquet table as they read JSONL."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from plm_toolkit.core.errors import DataError
from plm_toolkit.data.sources.pieces import plan_pieces, resolve_sources
from plm_toolkit.data.store.preparation import prepare_store
from plm_toolkit.data.store.token_store import TokenStore
from plm_toolkit.tasks.classification import read_columns
from tests.data.store.test_store import DOCUMENTS, config, decoded_documents, shard_digests


def write_parquet(path, rows: int = 20) -> None:
    texts = [*DOCUMENTS[:10], None, "", *DOCUMENTS[10:]]  # a null and an empty row: no document
    table = pa.table({"id": list(range(len(texts))), "text": texts, "score": [0.5] * len(texts)})
    pq.write_table(table, path, row_group_size=rows)


def test_row_groups_are_the_pieces(tmp_path):
    write_parquet(tmp_path / "corpus.parquet", rows=7)
    cfg = config(tmp_path, [tmp_path / "corpus.parquet"], shard_bytes=4096)
    sources = resolve_sources(cfg, "train")
    assert sources[0].format == "parquet"
    one_each = plan_pieces(sources, 1, "blank_line")
    assert len(one_each) == pq.ParquetFile(tmp_path / "corpus.parquet").metadata.num_row_groups == 9
    assert [p.start for p in one_each[1:]] == [p.end for p in one_each[:-1]]
    assert len(plan_pieces(sources, 1 << 30, "blank_line")) == 1


def test_parquet_gives_the_ids_jsonl_gives(tmp_path):
    write_parquet(tmp_path / "corpus.parquet", rows=6)
    rows = "".join(json.dumps({"text": d}) + "\n" for d in DOCUMENTS)
    (tmp_path / "corpus.jsonl").write_text(rows, encoding="utf-8")
    stores = {}
    for name, processes in (("parquet", 1), ("parquet", 2), ("jsonl", 1)):
        cfg = config(tmp_path, [tmp_path / f"corpus.{name}"], store=str(tmp_path / f"{name}{processes}"),
                     shard_bytes=4096, num_proc=processes)  # fmt: skip
        stores[name, processes] = prepare_store(cfg, "document_sentences")
    assert shard_digests(stores["parquet", 1]) == shard_digests(stores["parquet", 2])
    parquet, jsonl = (TokenStore(stores[key]) for key in (("parquet", 1), ("jsonl", 1)))
    assert decoded_documents(parquet) == decoded_documents(jsonl) == DOCUMENTS
    assert parquet.manifest["splits"]["train"]["shards"] > 1
    ids = [list(d) for d in parquet.split("train").documents()]
    assert ids == [list(d) for d in jsonl.split("train").documents()]


def test_a_changed_text_changes_the_fingerprint(tmp_path):
    write_parquet(tmp_path / "a.parquet")
    pq.write_table(pa.table({"text": ["Another text.", *DOCUMENTS[1:]]}), tmp_path / "b.parquet")
    prints = {TokenStore(prepare_store(config(tmp_path, [tmp_path / f"{n}.parquet"]), "documents")).fingerprint
              for n in "ab"}  # fmt: skip
    assert len(prints) == 2


def test_finetune_tables_read_parquet_as_jsonl(tmp_path):
    table = {"sentence": ["a fine film", "dull", "great fun"], "label": [1, 0, 1]}
    pq.write_table(pa.table(table), tmp_path / "train.parquet")
    rows = "".join(json.dumps({"sentence": s, "label": y}) + "\n" for s, y in zip(*table.values(), strict=True))
    (tmp_path / "train.jsonl").write_text(rows, encoding="utf-8")
    specs = {"text_column": "sentence", "label_column": "label"}
    assert read_columns(tmp_path / "train.parquet", specs) == read_columns(tmp_path / "train.jsonl", specs)
    with pytest.raises(DataError, match=r"train.parquet:1: no column 'text' \(task.text_column\)"):
        read_columns(tmp_path / "train.parquet", {"text_column": "text"})
