"""The sentence layouts (and WordPiece full sentences) give exactly the examples they gave before the token store:
same ids, same order, for a fixed seed, on the bundled corpus.

The digests were recorded from the datasets-based pipeline (commit 96446b1) before the store replaced it; a change
in them is a change in what every BERT, ALBERT, ELMo or BERT-MLM run trains on, and needs a reason in its commit.
"""

import hashlib
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from plm_toolkit.config.schema import DataConfig, TokenizerConfig
from plm_toolkit.data import DataPlan, prepare_pretraining_data
from plm_toolkit.data.corpus import resource_path

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
