"""The sentence layouts (and WordPiece full sentences), ERNIE's knowledge units and translation's token batches give
exactly the examples they gave before the token store: same ids, same order, for a fixed seed.

The digests were recorded from the datasets-based pipelines before the store replaced them (commit 96446b1 for the
sentence layouts, fffa5b6 for ERNIE's units and parallel text); a change in them is a change in what every BERT,
ALBERT, ELMo, BERT-MLM, ERNIE or Transformer run trains on, and needs a reason in its commit.
"""

import hashlib
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from plm_toolkit.core.data_schema import DataConfig, ParallelDataConfig, TokenizerConfig
from plm_toolkit.core.resources import resource_path
from plm_toolkit.data.build import prepare_pretraining_data
from plm_toolkit.data.layouts.plan import DataPlan
from plm_toolkit.data.layouts.translation_pairs import prepare_parallel_data
from plm_toolkit.data.units.knowledge import ENTITY, PHRASE
from plm_toolkit.objectives.knowledge_masking import KnowledgeMaskingConfig

RECORDED = {
    "sentence_pairs": (5185, "8bb26d3f65e7ae9ac3b54a9417b262fe0a9b24d1dce851764f2f13f9ed421b39"),
    "segment_pairs": (4383, "9a4929ee6ef949af5d00c92f2ce510162dcf918bd0d5c431a71a797bc395b681"),
    "full_sentences": (8972, "2532c2ef2976d276df5149359a38985cf96435cb0b66662e177cdfba0649793e"),
    "sentence_streams": (8994, "7a4b3315a58329c95a85d4dda66308179616a403d2393ecbc1326282217213f4"),
}
PLANS = {
    "sentence_pairs": ("wordpiece", DataPlan("sentence_pairs")),
    "segment_pairs": ("wordpiece", DataPlan("segment_pairs")),
    "full_sentences": ("wordpiece", DataPlan("full_sentences")),
    "sentence_streams": ("word", DataPlan("sentence_streams", window=21, stride=20, order="stream", spellings=True)),
}


def examples_digest(examples) -> str:
    """sha256 over every example in order: each column's name and values (ids as int64, spellings as text)."""
    digest = hashlib.sha256()
    for i in range(len(examples)):
        row = examples[i]
        for name in sorted(row):
            value = row[name]
            digest.update(name.encode())
            if name.endswith("_spellings"):
                digest.update("\x00".join(value).encode() + b"\x01")
            else:
                digest.update(np.asarray(value, dtype=np.int64).tobytes() + b"\x01")
    return digest.hexdigest()


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def vocab_txt(tmp_path_factory) -> str:
    """A WordPiece vocab.txt built deterministically from the corpus (a trained WordPiece breaks ties at random):
    BERT's special tokens, every character alone and as a ``##`` piece, and the words seen at least 5 times."""
    text = Path(resource_path("corpora/wikitext2/train.txt")).read_text(encoding="utf-8").lower()
    characters = sorted(set(text) - set(" \n"))
    counts = Counter(re.findall(r"\w+", text))
    words = sorted(w for w, n in counts.items() if n >= 5 and len(w) > 1)
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *characters, *(f"##{c}" for c in characters), *words]
    path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("layout", list(PLANS))
def test_sentence_layouts_give_the_recorded_examples(layout, cache, vocab_txt):
    kind, plan = PLANS[layout]
    # A word vocabulary is trained deterministically (every word, by falling count); WordPiece's is read from a file.
    tokenizer = TokenizerConfig(kind=kind, path=None if kind == "word" else vocab_txt)
    train = resource_path("corpora/wikitext2/train.txt")
    cfg = OmegaConf.structured(
        DataConfig(train_files=[train], cache_dir=str(cache), max_seq_len=40, tokenizer=tokenizer)
    )
    examples = prepare_pretraining_data(cfg, plan, seed=5).train
    assert (len(examples), examples_digest(examples)) == RECORDED[layout]


def test_knowledge_units_give_the_recorded_examples(cache, vocab_txt, tmp_path):
    """ERNIE's full-sentence blocks with their join codes: entities from a gazetteer, phrases learned from the
    corpus by collocation scores (two passes, the defaults)."""
    gazetteer = tmp_path / "gazetteer.txt"
    gazetteer.write_text("North Korea\nUnited States\nDu Fu\nWorld War II\nNew York\n", encoding="utf-8")
    units = KnowledgeMaskingConfig(entity_gazetteer=str(gazetteer))
    cfg = OmegaConf.structured(
        DataConfig(
            train_files=[resource_path("corpora/wikitext2/train.txt")],
            cache_dir=str(cache),
            max_seq_len=40,
            tokenizer=TokenizerConfig(kind="wordpiece", path=vocab_txt),
        )
    )
    examples = prepare_pretraining_data(cfg, DataPlan("full_sentences", units=units), seed=5).train
    assert set(examples[0]) == {"input_ids", "token_type_ids", "units"}
    codes = Counter(code for row in examples for code in row["units"])
    assert codes[PHRASE] > 1000 and codes[ENTITY] > 50  # learned phrases and the gazetteer's entities are there
    assert (len(examples), examples_digest(examples)) == (
        8972,
        "5866481547a94c6c574efa72b9354bdd19948bdfcf0c9f2675519c55a054baec",
    )


def batches_digest(batches) -> str:
    """sha256 over every token batch in order: each row's index, source ids and target ids."""
    digest = hashlib.sha256()
    for i in range(len(batches)):
        for row in batches[i]:
            values = [row["index"], -1, *row["source_ids"], -1, *row["target_ids"]]
            digest.update(np.asarray(values, dtype=np.int64).tobytes() + b"\x01")
        digest.update(b"\x02")
    return digest.hexdigest()


def test_parallel_text_gives_the_recorded_batches(shared_data, cache):
    """Translation's token batches on the shared en-de pairs (a prefix for training, JSONL for validation), with
    a fixed tokenizer, sentences cut to data.max_seq_len, and the validation references."""
    root = shared_data / "translation" / "en-de"
    vocab = shared_data / "models" / "bert-base-uncased" / "vocab.txt"
    cfg = OmegaConf.structured(
        ParallelDataConfig(
            name="parallel",
            train_files=[str(root / "train")],
            validation_files=[str(root / "dev.jsonl")],
            cache_dir=str(cache),
            max_seq_len=24,
            max_tokens=300,
            max_sentences=16,
            tokenizer=TokenizerConfig(kind="wordpiece", path=str(vocab)),
        )
    )
    data = prepare_parallel_data(cfg, seed=5)
    assert (len(data.train), data.train.num_rows(), len(data.validation)) == (1922, 27583, 117)
    assert batches_digest(data.train) == "8d9271b417b9132cf8e5f0e743b541e63f290bd460317731ef3a4d1b52979c65"
    assert batches_digest(data.validation) == "01e9c475706ab82717b693eb094b371f62c7ad311d7c8988cc18f4707acedaf1"
    references = hashlib.sha256("\n".join(data.references).encode()).hexdigest()
    assert references == "4c4768b1eb6a0e3c8fb260428e86e99519279e3eb2642dd0eeda49bbad99a89f"
