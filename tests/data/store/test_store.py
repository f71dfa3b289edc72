"""The token store: what plm-prepare writes (shards of ids, their index, the manifest), from every kind of input,
the same store whatever the number of worker processes, and a killed preparation that resumes to the same store."""

import gzip
import hashlib
import json
import os
import subprocess
import sys

import datasets
import numpy as np
import pytest
from omegaconf import OmegaConf

from plm_toolkit.core.data_schema import DataConfig, TokenizerConfig, TokenizerKind
from plm_toolkit.data.store.preparation import prepare_store
from plm_toolkit.data.store.shard_worker import KILL_AFTER
from plm_toolkit.data.store.token_store import Shard, TokenStore

# Documents of a few lines; the corpus repeats them so that small shards make several pieces.
DOCUMENTS = [f"Document {k} begins here.\nIts second line, number {k}!  Two spaces.\n\tAnd a tab." for k in range(60)]


def config(tmp_path, files, **fields) -> DataConfig:
    tokenizer = TokenizerConfig(kind=TokenizerKind.character, vocab_size=120)
    fields.setdefault("cache_dir", str(tmp_path / "cache"))
    return OmegaConf.structured(DataConfig(train_files=[str(f) for f in files], tokenizer=tokenizer, **fields))


def write_corpus(tmp_path, name="corpus.txt") -> str:
    path = tmp_path / name
    path.write_text("\n\n".join(DOCUMENTS) + "\n", encoding="utf-8")
    return str(path)


def decoded_documents(store: TokenStore, split="train") -> list[str]:
    return [store.tokenizer.decode([t for s in d for t in s]) for d in store.split(split).documents()]


def shard_digests(folder) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != "manifest.json"
    }


def test_store_format_and_the_same_shards_whatever_the_processes(tmp_path):
    corpus = write_corpus(tmp_path)
    one = prepare_store(
        config(tmp_path, [corpus], store=str(tmp_path / "1"), shard_bytes=4096, num_proc=1), "documents"
    )
    two = prepare_store(
        config(tmp_path, [corpus], store=str(tmp_path / "2"), shard_bytes=4096, num_proc=2), "documents"
    )
    assert shard_digests(one) == shard_digests(two)
    store = TokenStore(one)
    assert decoded_documents(store) == DOCUMENTS
    manifest = json.loads((one / "manifest.json").read_text())
    train = manifest["splits"]["train"]
    assert train["shards"] == len(list((one / "train").glob("*.bin"))) > 1
    assert train["documents"] == len(DOCUMENTS) and train["tokens"] == sum(len(d) for d in DOCUMENTS)
    shard = Shard.open(one / "train" / "00000")
    assert shard.ids.dtype == np.uint16 and (one / "train" / "00000.bin").stat().st_size == 2 * shard.num_tokens
    ends = shard.array("document_ends")
    assert ends[-1] == shard.num_tokens and np.all(np.diff(ends) > 0)
    assert manifest["settings"]["unit"] == "documents" and manifest["prepared"]["processes"] in (1, 2)


def test_every_kind_of_input_gives_the_same_documents(tmp_path):
    text = "\n\n".join(DOCUMENTS) + "\n"
    (tmp_path / "a.txt.gz").write_bytes(gzip.compress(text.encode()))
    rows = "".join(json.dumps({"text": d, "id": k}) + "\n" for k, d in enumerate(DOCUMENTS))
    (tmp_path / "b.jsonl").write_text(rows, encoding="utf-8")
    zstandard = pytest.importorskip("zstandard")
    (tmp_path / "c.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(rows.encode()))
    (tmp_path / "parts").mkdir()
    for k in range(3):
        (tmp_path / "parts" / f"{k}.txt").write_text("\n\n".join(DOCUMENTS[k::3]), encoding="utf-8")
    cfg = config(tmp_path, [tmp_path / "a.txt.gz", tmp_path / "b.jsonl", tmp_path / "c.jsonl.zst"], shard_bytes=4096)
    store = TokenStore(prepare_store(cfg, "documents"))
    assert decoded_documents(store) == DOCUMENTS * 3
    globbed = TokenStore(prepare_store(config(tmp_path, [tmp_path / "parts" / "*.txt"]), "documents"))
    assert decoded_documents(globbed) == [d for k in range(3) for d in DOCUMENTS[k::3]]
    datasets.Dataset.from_dict({"body": DOCUMENTS}).save_to_disk(str(tmp_path / "saved"))
    saved = config(tmp_path, [], dataset_path=str(tmp_path / "saved"), text_column="body", shard_bytes=4096)
    assert decoded_documents(TokenStore(prepare_store(saved, "documents"))) == DOCUMENTS


def test_sentence_starts_and_spellings_are_kept(tmp_path):
    cfg = config(tmp_path, [write_corpus(tmp_path)])
    store = TokenStore(prepare_store(cfg, "document_sentences"))
    first = next(store.split("train").documents())
    texts = [store.tokenizer.decode(s) for s in first]
    assert texts == ["Document 0 begins here.\n", "Its second line, number 0!  ", "Two spaces.\n\t", "And a tab."]
    words = OmegaConf.structured(DataConfig(train_files=[str(tmp_path / "corpus.txt")], cache_dir=str(tmp_path / "w")))
    words.tokenizer = TokenizerConfig(path=str(tmp_path / "vocab.txt"))
    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "document", "."]))
    spelled = TokenStore(prepare_store(words, "sentences", spellings=True)).split("train")
    unknown = next(spelled.documents("unknown"))
    assert unknown[0] == ["0", "begins", "here"] and unknown[1][:3] == ["Its", "second", "line"]


def test_a_killed_preparation_resumes_to_the_same_store(tmp_path):
    corpus = write_corpus(tmp_path)
    fields = {"shard_bytes": 4096, "num_proc": 1}
    fresh = prepare_store(config(tmp_path, [corpus], store=str(tmp_path / "fresh"), **fields), "documents")
    overrides = [
        "model=gpt2",
        "data=text_files",
        f"data.train_files=[{corpus}]",
        f"data.store={tmp_path / 'killed'}",
        f"data.cache_dir={tmp_path / 'cache'}",
        "data.tokenizer.kind=character",
        "data.tokenizer.vocab_size=120",
        *(f"data.{k}={v}" for k, v in fields.items()),
    ]
    env = {**os.environ, KILL_AFTER: "2"}
    command = [sys.executable, "-m", "plm_toolkit.commands.prepare", *overrides]
    killed = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True)
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    assert not (tmp_path / ".lock").exists()  # plm-prepare writes nothing but its store, not even a run lock
    assert not (tmp_path / "killed" / "manifest.json").exists()
    assert len(list((tmp_path / "killed" / "train").glob("*.idx"))) == 2
    resumed = prepare_store(config(tmp_path, [corpus], store=str(tmp_path / "killed"), **fields), "documents")
    assert shard_digests(resumed) == shard_digests(fresh)
