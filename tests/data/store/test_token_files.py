"""Megatron-LM's and nanoGPT's token files both ways (``data/store/token_files.py``, ``data/store/foreign.py``,
``data/store/export.py``): a store exported and read back gives the same examples; megatron-core's own
IndexedDataset reads our export as the same documents, and a pair its IndexedDatasetBuilder writes is read here with
the same ids; nanoGPT's train.bin as its prepare.py writes it is read as its documents."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from plm_toolkit.core.data_schema import DataConfig
from plm_toolkit.core.errors import DataError
from plm_toolkit.data.build import prepare_pretraining_data
from plm_toolkit.data.layouts.plan import DataPlan
from plm_toolkit.data.layouts.registry import store_unit
from plm_toolkit.data.store.export import write_token_files
from plm_toolkit.data.store.foreign import open_foreign_store
from plm_toolkit.data.store.preparation import prepare_store
from plm_toolkit.data.store.token_store import TokenStore
from plm_toolkit.data.tokenization.template import template_of
from tests.bad_inputs.test_bad_inputs_formats import gpt2_style_tokenizer

WORDS = "the cat sat on a mat and dog ran far away under bright sky with green trees while birds sang".split()  # noqa: SIM905


def corpus(path: Path, documents: int, seed: int) -> None:
    rng = random.Random(seed)
    texts = []
    for _ in range(documents):
        sentences = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 11))).capitalize() + "."
                     for _ in range(rng.randint(1, 5))]  # fmt: skip
        texts.append(" ".join(sentences))
    path.write_text("\n\n".join(texts) + "\n", encoding="utf-8")


def data_config(tmp: Path, **overrides):
    base = {"cache_dir": str(tmp / "cache"), "max_seq_len": 24, "num_proc": 1}
    return OmegaConf.merge(OmegaConf.structured(DataConfig), base, overrides)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> dict:
    """A store of 97 documents (train) and 23 (validation) with sentence starts, its tokenizer, and its exports."""
    tmp = tmp_path_factory.mktemp("token_files")
    corpus(tmp / "train.txt", 97, 0)
    corpus(tmp / "valid.txt", 23, 1)
    gpt2_style_tokenizer(tmp / "tokenizer.json")
    files = {"train_files": [str(tmp / "train.txt")], "validation_files": [str(tmp / "valid.txt")]}
    cfg = data_config(tmp, store=str(tmp / "store"), tokenizer={"path": str(tmp / "tokenizer.json")}, **files)
    prepare_store(cfg, store_unit(DataPlan("full_sentences")))
    for fmt in ("megatron", "nanogpt"):
        (tmp / fmt).mkdir()
        write_token_files(tmp / "store", tmp / fmt, fmt)
    (tmp / "no_eod").mkdir()
    write_token_files(tmp / "store", tmp / "no_eod", "megatron", eod=False)
    return {"tmp": tmp, "cfg": cfg, "store": TokenStore(tmp / "store")}


def foreign(prepared, store: str, **overrides):
    tmp = prepared["tmp"]
    return data_config(tmp, store=store, tokenizer={"path": str(tmp / "tokenizer.json")}, **overrides)


@pytest.mark.parametrize("layout", ["streams", "full_sentences"])
@pytest.mark.parametrize("exported", ["megatron/train", "nanogpt/train.bin"])
def test_exported_store_read_back_gives_the_same_examples(prepared, exported, layout):
    tmp = prepared["tmp"]
    ours = prepare_pretraining_data(prepared["cfg"], layout, 0)
    theirs = prepare_pretraining_data(foreign(prepared, str(tmp / exported)), layout, 0)
    if layout == "streams":  # the stream is the same token for token: documents and separators
        assert len(theirs.train) == len(ours.train) > 20
        assert theirs.train[:] == ours.train[:]
        assert theirs.validation[:] == ours.validation[:]
    else:  # blocks of whole sentences (documents for nanoGPT) in order, the file's separators kept, none added
        separator = ours.vocab.document_separator
        template = template_of(ours.tokenizer, pair=False)
        first = template.assemble([7])[2]["A"]
        blocks = [
            row["input_ids"][first : len(row["input_ids"]) - template.num_special + first] for row in theirs.train
        ]
        assert all(len(row["input_ids"]) <= 24 for row in theirs.train) and len(blocks) > 20
        documents = prepared["store"].split("train").documents()
        assert sum(blocks, []) == [i for d in documents for i in [*sum(d, []), separator]]


def test_megatron_export_holds_sentences_as_sequences_and_the_separator(prepared):
    store, tmp = prepared["store"], prepared["tmp"]
    split = store.split("train")
    sentences = [s for d in split.documents() for s in d]
    separator = 0  # <|endoftext|>, the tokenizer's first token
    theirs = open_foreign_store(foreign(prepared, str(tmp / "megatron" / "train")), "streams").split("train")
    shard = theirs.shards[0]
    assert theirs.separated and shard.num_documents == split.num_documents
    expected = np.concatenate([np.asarray(sum(d, []) + [separator]) for d in split.documents()])
    assert np.array_equal(np.asarray(shard.ids), expected)
    assert len(shard.array("sentence_ends")) == len(sentences)
    plain = open_foreign_store(foreign(prepared, str(tmp / "no_eod" / "train")), "streams").split("train")
    assert not plain.separated
    assert np.array_equal(np.asarray(plain.shards[0].ids), np.concatenate([np.asarray(s) for s in sentences]))


def test_nanogpt_file_as_prepare_py_writes_it(prepared, tmp_path):
    """nanoGPT's openwebtext/prepare.py: encode_ordinary(text) + [eot] per document, uint16, concatenated."""
    rng = np.random.default_rng(0)
    documents = [rng.integers(1, 300, rng.integers(1, 40)).tolist() for _ in range(31)]
    (tmp_path / "data").mkdir()
    for name, docs in (("train.bin", documents), ("val.bin", documents[:5])):
        np.asarray([i for d in docs for i in [*d, 0]], np.uint16).tofile(tmp_path / "data" / name)
    cfg = foreign(prepared, str(tmp_path / "data" / "train.bin"), cache_dir=str(tmp_path / "cache"))
    store = open_foreign_store(cfg, "streams")
    assert [sum(d, []) for d in store.split("train").documents()] == [[*d, 0] for d in documents]
    assert store.split("validation").num_documents == 5
    windows = prepare_pretraining_data(cfg, "streams", 0).train
    flat = [i for d in documents for i in [*d, 0]]
    assert windows[3]["input_ids"] == flat[3 * 24 : 3 * 24 + 25]  # the file's ids as written, nothing added


def test_sentence_pairs_are_refused_on_a_foreign_store(prepared):
    cfg = foreign(prepared, str(prepared["tmp"] / "megatron" / "train"))
    with pytest.raises(DataError, match="without sentence boundaries, which BERT's sentence pairs"):
        open_foreign_store(cfg, "sentence_pairs")


def _megatron_core():
    return pytest.importorskip("megatron.core.datasets.indexed_dataset")


@pytest.mark.slow
def test_megatron_core_reads_our_export(prepared):
    indexed = _megatron_core()
    split = prepared["store"].split("train")
    dataset = indexed.IndexedDataset(str(prepared["tmp"] / "megatron" / "train"))
    boundaries = dataset.document_indices
    assert len(boundaries) - 1 == split.num_documents
    for number, document in enumerate(split.documents()):
        sequences = [dataset[k].tolist() for k in range(boundaries[number], boundaries[number + 1])]
        assert sequences[:-1] == document[:-1] and sequences[-1] == [*document[-1], 0]
    plain = indexed.IndexedDataset(str(prepared["tmp"] / "no_eod" / "train"))
    assert [plain[k].tolist() for k in range(len(plain))] == [s for d in split.documents() for s in d]


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.uint16, np.int32])
def test_a_pair_megatron_core_writes_is_read_with_the_same_ids(prepared, tmp_path, dtype):
    torch = pytest.importorskip("torch")
    indexed = _megatron_core()
    rng = np.random.default_rng(1)
    builder = indexed.IndexedDatasetBuilder(str(tmp_path / "corpus.bin"), dtype=dtype)
    documents = []
    for _ in range(17):  # --split-sentences: sentences as items, end_document after each document
        sentences = [rng.integers(1, 300, rng.integers(1, 9)).tolist() for _ in range(rng.integers(1, 4))]
        for sentence in sentences:
            builder.add_item(torch.tensor(sentence))
        builder.end_document()
        documents.append(sentences)
    builder.finalize(str(tmp_path / "corpus.idx"))
    cfg = foreign(prepared, str(tmp_path / "corpus"), cache_dir=str(tmp_path / "cache"))
    split = open_foreign_store(cfg, "streams").split("train")
    assert list(split.documents()) == documents
    assert split.shards[0].ids.dtype == np.dtype(dtype)
    streams = prepare_pretraining_data(cfg, "sentence_streams", 0).train  # ELMo: a sequence is a sentence
    assert streams[0]["input_ids"][1 : 1 + len(documents[0][0])] == documents[0][0]


@pytest.mark.slow
@pytest.mark.parametrize("fmt,store", [("megatron", "train"), ("nanogpt", "train.bin")])
def test_plm_export_then_plm_train_on_the_files(prepared, tmp_path, fmt, store):
    """The user's path: plm-export STORE OUT --format F, then plm-train data.store=OUT/... with the tokenizer."""
    from plm_toolkit.commands.export import main as export_main

    assert export_main([str(prepared["tmp"] / "store"), str(tmp_path / "out"), "--format", fmt]) == 0
    manifest = json.loads((tmp_path / "out" / "exported.json").read_text())
    assert manifest["format"] == fmt and manifest["splits"]["train"]["documents"] == 97
    assert manifest["vocab_size"] == prepared["store"].tokenizer.get_vocab_size()
    # The export is whole: plm-train reads its ids with the tokenizer written beside them.
    overrides = [f"data.store={tmp_path / 'out' / store}", f"data.tokenizer.path={tmp_path / 'out' / 'tokenizer.json'}",
                 "model=gpt2_tiny", "data.max_seq_len=24", f"data.cache_dir={tmp_path / 'cache'}",
                 "trainer.max_steps=2", "trainer.progress_bar=false", "trainer.tensorboard=false", "hardware=cpu",
                 f"hydra.run.dir={tmp_path / 'run'}"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "plm_toolkit.commands.train", *overrides], capture_output=True,
    text=True,
                          env=env, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any("eval_loss" in m for m in metrics)  # the validation file beside the training one was found


def test_nanogpt_export_carries_its_tokenizer_and_meta_as_json(prepared, tmp_path):
    """What nanoGPT's sample.py and train.py read from meta.pkl (vocab_size, itos, stoi), as meta.json, and the
    tokenizer that decodes train.bin back to the store's first document."""
    from tokenizers import Tokenizer

    from plm_toolkit.commands.export import main as export_main

    assert export_main([str(prepared["tmp"] / "store"), str(tmp_path / "out"), "--format", "nanogpt"]) == 0
    out, store = tmp_path / "out", prepared["store"]
    assert not list(out.glob("*.pkl"))
    meta = json.loads((out / "meta.json").read_text(encoding="utf-8"))  # a nanoGPT-style reader
    itos = {int(i): token for i, token in meta["itos"].items()}
    assert meta["vocab_size"] == store.tokenizer.get_vocab_size() == len(itos) == len(meta["stoi"])
    assert all(meta["stoi"][token] == i for i, token in itos.items())
    ids = np.memmap(out / "train.bin", dtype=np.uint16, mode="r")
    assert int(ids.max()) < meta["vocab_size"]
    first = sum(next(store.split("train").documents()), [])
    tokenizer = Tokenizer.from_file(str(out / "tokenizer.json"))
    assert ids[: len(first)].tolist() == first and ids[len(first)] == meta["stoi"]["<|endoftext|>"]
    assert tokenizer.decode(first) == store.tokenizer.decode(first)
    assert [itos[i] for i in first] == [store.tokenizer.id_to_token(i) for i in first]


@pytest.mark.slow
def test_megatron_core_loads_the_tokenizer_beside_our_export(prepared, tmp_path):
    """megatron-core's MegatronTokenizer.from_pretrained(OUT): the vocabulary's size, and the store's ids for the
    store's text."""
    pytest.importorskip("megatron.core.tokenizers")
    from megatron.core.tokenizers import MegatronTokenizer

    from plm_toolkit.commands.export import main as export_main

    assert export_main([str(prepared["tmp"] / "store"), str(tmp_path / "out"), "--format", "megatron"]) == 0
    tokenizer = MegatronTokenizer.from_pretrained(str(tmp_path / "out"))
    store = prepared["store"]
    assert tokenizer.vocab_size == store.tokenizer.get_vocab_size()
    sentence = next(store.split("train").documents())[0]
    assert tokenizer.tokenize(store.tokenizer.decode(sentence)) == sentence
