"""Parallel text: prefix and JSONL formats read into a token store (cut into pieces after the same lines of both
files, the same pairs whatever the pieces and processes), the bad inputs of translation data, sentences cut to
data.max_seq_len, the joint vocabulary, token-count batches."""

import json
import logging
import random

import pytest
from omegaconf import OmegaConf
from tokenizers import Tokenizer, models, pre_tokenizers

from plm_toolkit.core.data_schema import ParallelDataConfig, TokenizerConfig
from plm_toolkit.core.errors import ConfigError, DataError
from plm_toolkit.data.layouts.token_batches import TokenBatches, token_batches
from plm_toolkit.data.layouts.translation_pairs import prepare_parallel_data
from plm_toolkit.data.layouts.windows import ExampleView
from plm_toolkit.data.sources.parallel_text import resolve

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = [f"w{k}" for k in range(10)] + ["Hello", "world", "Good", "morning", "Thank", "you", "Hallo", "Welt"]
WORDS += ["Guten", "Morgen", "Danke", "one", "three", "four", "eins", "zwei", "vier", "a", "b", "c", "x", "y", "z"]


def word_tokenizer(tmp_path) -> str:
    """A whitespace word-level tokenizer over WORDS, saved; returns its path."""
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(SPECIALS + WORDS)}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    path = tmp_path / "words.json"
    tokenizer.save(str(path))
    return str(path)


def data_cfg(tmp_path, train, validation=(), tokenizer=None, **extra):
    fields = {"max_seq_len": 64, "max_tokens": 256, "num_proc": 1, **extra}
    tokenizer = tokenizer or TokenizerConfig(path=word_tokenizer(tmp_path))
    return OmegaConf.structured(
        ParallelDataConfig(
            name="parallel",
            train_files=list(train),
            validation_files=list(validation),
            cache_dir=str(tmp_path / "cache"),
            tokenizer=tokenizer,
            **fields,
        )  # fmt: skip
    )


def read_pairs(cfg, split="train"):
    """The (source, target) pairs of ``split`` as the store gives them back, in order, decoded to words."""
    data = prepare_parallel_data(cfg, seed=0)
    batches = data.train if split == "train" else data.validation
    if batches is None:
        return None
    rows = sorted((row for k in range(len(batches)) for row in batches[k]), key=lambda row: row["index"])
    assert [row["index"] for row in rows] == list(range(len(rows)))
    words = lambda ids: " ".join(data.tokenizer.id_to_token(i) for i in ids)  # noqa: E731
    return [(words(row["source_ids"]), words(row["target_ids"])) for row in rows]


def write_prefix(root, name, en, de):
    (root / f"{name}.en").write_text("".join(line + "\n" for line in en))
    (root / f"{name}.de").write_text("".join(line + "\n" for line in de))
    return str(root / name)


def test_prefix_and_jsonl_read_the_same_pairs(tmp_path):
    en, de = ["Hello world", "Good morning", "Thank you"], ["Hallo Welt", "Guten Morgen", "Danke"]
    prefix = write_prefix(tmp_path, "train", en, de)
    jsonl = tmp_path / "train.jsonl"
    jsonl.write_text(
        "".join(json.dumps({"en": a, "de": b, "catalog": "x"}) + "\n" for a, b in zip(en, de, strict=True))
    )
    for spec in (prefix, str(jsonl), prefix + "."):
        assert read_pairs(data_cfg(tmp_path, [spec])) == list(zip(en, de, strict=True))
    assert read_pairs(data_cfg(tmp_path, [prefix, str(jsonl)])) == list(zip(en + en, de + de, strict=True))
    assert read_pairs(data_cfg(tmp_path, [prefix]), "validation") is None
    validation = prepare_parallel_data(data_cfg(tmp_path, [prefix], [str(jsonl)]), seed=0)
    assert validation.sources == en and validation.references == de


def test_pieces_and_processes_give_the_same_pairs(tmp_path):
    """Files cut into pieces of 4 kB (after the same lines of both) and read by two processes give the pairs one
    piece gives; the JSONL file's bad row is named by its line in the whole file, whichever piece holds it."""
    rng = random.Random(0)
    en = [" ".join(rng.choice(WORDS) for _ in range(rng.randrange(1, 30))) for _ in range(600)]
    de = [" ".join(rng.choice(WORDS) for _ in range(rng.randrange(1, 30))) for _ in range(600)]
    en[17] = ""  # skipped, counted
    prefix = write_prefix(tmp_path, "train", en, de)
    whole = read_pairs(data_cfg(tmp_path, [prefix], store=str(tmp_path / "one")))
    expected = [(a, b) for a, b in zip(en, de, strict=True) if a and b]
    assert whole == expected
    cut = data_cfg(tmp_path, [prefix], store=str(tmp_path / "cut"), shard_bytes=4096, num_proc=2)
    assert read_pairs(cut) == expected
    assert json.loads((tmp_path / "cut" / "manifest.json").read_text())["splits"]["train"]["shards"] > 5
    jsonl = tmp_path / "rows.jsonl"
    rows = [json.dumps({"en": a or "x", "de": b}) for a, b in zip(en, de, strict=True)]
    rows[400] = json.dumps({"en": "a", "fr": "b"})
    jsonl.write_text("\n".join(rows) + "\n")
    with pytest.raises(DataError, match=rf"{jsonl}:401: no key 'de'"):
        prepare_parallel_data(data_cfg(tmp_path, [str(jsonl)], shard_bytes=4096), seed=0)


def test_different_line_counts_name_both_files_and_counts(tmp_path):
    prefix = write_prefix(tmp_path, "train", ["a", "b", "c"], ["x", "y"])
    with pytest.raises(DataError) as err:
        read_pairs(data_cfg(tmp_path, [prefix]))
    message = str(err.value)
    assert f"{prefix}.en has 3 lines" in message and f"{prefix}.de has 2" in message
    prefix = write_prefix(tmp_path, "other", ["a"], ["x", "y", "z"])
    with pytest.raises(DataError, match=r"other\.en has 1 lines but .*other\.de has 3"):
        read_pairs(data_cfg(tmp_path, [prefix]))


def test_empty_lines_are_skipped_and_counted(tmp_path, caplog):
    prefix = write_prefix(tmp_path, "train", ["one", "", "three", "four"], ["eins", "zwei", "  ", "vier"])
    with caplog.at_level(logging.WARNING, logger="plm_toolkit"):
        assert read_pairs(data_cfg(tmp_path, [prefix])) == [("one", "eins"), ("four", "vier")]
    assert "skipped 2 of 4 pairs with an empty source or target line" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="plm_toolkit"):
        read_pairs(data_cfg(tmp_path, [prefix]))  # from the finished store: still counted
    assert "skipped 2 of 4" in caplog.text
    empty = write_prefix(tmp_path, "empty", ["one", ""], ["", "zwei"])
    with pytest.raises(DataError, match=r"no sentence pairs \(every pair has an empty side\)"):
        read_pairs(data_cfg(tmp_path, [empty]))


def test_jsonl_row_without_a_language_key_names_file_and_line(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text('{"en": "a", "de": "b"}\n\n{"en": "c", "fr": "d"}\n')
    with pytest.raises(DataError, match=rf"{path}:3: no key 'de' \(data.target_lang\); the row has 'en', 'fr'"):
        read_pairs(data_cfg(tmp_path, [str(path)]))
    path.write_text('{"en": "a", "de": "b"}\n[1, 2]\n')
    with pytest.raises(DataError, match=rf"{path}:2: expected a JSON object"):
        read_pairs(data_cfg(tmp_path, [str(path)]))
    path.write_text('{"en": "a", "de": 3}\n')
    with pytest.raises(DataError, match=rf"{path}:1: 'de' is a number; expected a string"):
        read_pairs(data_cfg(tmp_path, [str(path)]))
    assert not list((tmp_path / "cache").rglob("*.tmp"))  # no half-written shard


def test_missing_files_and_a_language_file_given_as_prefix(tmp_path):
    prefix = write_prefix(tmp_path, "train", ["a"], ["b"])
    with pytest.raises(DataError, match=r"train\.en is a file: give its prefix"):
        resolve(prefix + ".en", "en", "de")
    with pytest.raises(DataError, match=r"missing: .*nothere\.en, .*nothere\.de"):
        resolve(str(tmp_path / "nothere"), "en", "de")
    with pytest.raises(ConfigError, match="both 'en'"):
        read_pairs(data_cfg(tmp_path, [prefix], target_lang="en"))


def test_long_sentences_are_cut_with_a_counted_warning(tmp_path, caplog):
    prefix = write_prefix(tmp_path, "train", ["w1 w2", "w1 w2 w3 w4 w5 w6"], ["w3", "w1 w2 w3 w4 w5"])
    with caplog.at_level(logging.WARNING, logger="plm_toolkit"):
        pairs = read_pairs(data_cfg(tmp_path, [prefix], max_seq_len=5, max_tokens=64))
    assert pairs == [("w1 w2", "w3"), ("w1 w2 w3 w4", "w1 w2 w3 w4")]
    assert "cut 1 source and 1 target sentences of 2 pairs to 4 tokens" in caplog.text
    # The store keeps whole sentences: another length reads them from it again, without tokenizing.
    assert read_pairs(data_cfg(tmp_path, [prefix], max_seq_len=8, max_tokens=64))[1][0] == "w1 w2 w3 w4 w5 w6"
    assert len(list((tmp_path / "cache" / "stores").iterdir())) == 1


def test_the_joint_vocabulary_learns_both_sides(tmp_path):
    prefix = write_prefix(tmp_path, "train", ["abc abc", "cab"], ["xyz", "zyx zz"])
    tokenizer = TokenizerConfig(kind="character", vocab_size=40)
    data = prepare_parallel_data(data_cfg(tmp_path, [prefix], tokenizer=tokenizer), seed=0)
    assert {"a", "b", "c", "x", "y", "z"} <= set(data.tokenizer.get_vocab())


def test_token_batches_respect_the_budget_and_cover_every_row_once():
    rng = random.Random(0)
    src = [rng.randint(1, 40) for _ in range(500)]
    tgt = [rng.randint(1, 40) for _ in range(500)]
    batches = token_batches(src, tgt, max_tokens=200, seed=3)
    assert sorted(i for b in batches for i in b) == list(range(500))
    for batch in batches:
        assert len(batch) * max(src[i] for i in batch) <= 200
        assert len(batch) * max(tgt[i] for i in batch) <= 200
    # Sorting by length keeps padding small: well over half of the padded slots hold real tokens.
    real = sum(src) + sum(tgt)
    padded = sum(len(b) * (max(src[i] for i in b) + max(tgt[i] for i in b)) for b in batches)
    assert real / padded > 0.6
    assert batches == token_batches(src, tgt, max_tokens=200, seed=3)
    assert batches != token_batches(src, tgt, max_tokens=200, seed=4)
    assert all(len(b) <= 3 for b in token_batches(src, tgt, max_tokens=200, max_rows=3))
    # A row longer than the budget is a batch of its own.
    assert sorted(map(sorted, token_batches([5, 300, 5], [5, 5, 5], max_tokens=100))) == [[0, 2], [1]]


class Sources(ExampleView):
    column_names = ["source_ids"]

    def __init__(self, sizes):
        self.sizes = sizes

    def __len__(self) -> int:
        return len(self.sizes)

    def row(self, index: int) -> dict:
        return {"source_ids": [1] * self.sizes[index]}


def test_token_batches_item_is_a_list_of_rows():
    batched = TokenBatches(Sources((3, 1, 2, 3)), token_batches([3, 1, 2, 3], [1, 1, 1, 1], max_tokens=6))
    assert batched.num_rows() == 4
    assert [[len(r["source_ids"]) for r in batched[i]] for i in range(len(batched))] == [[1, 2], [3, 3]]


@pytest.mark.slow
def test_plm_prepare_of_parallel_text_killed_halfway_resumes_to_the_same_store(tmp_path):
    import os
    import subprocess
    import sys

    from plm_toolkit.data.store.shard_worker import KILL_AFTER
    from plm_toolkit.data.store.translation_pairs import prepare_parallel_store
    from tests.data.store.test_store import shard_digests

    rng = random.Random(1)
    lines = [[" ".join(rng.choice(WORDS) for _ in range(rng.randrange(1, 25))) for _ in range(500)] for _ in "ab"]
    prefix = write_prefix(tmp_path, "train", *lines)
    fresh = prepare_parallel_store(data_cfg(tmp_path, [prefix], store=str(tmp_path / "fresh"), shard_bytes=4096))
    overrides = ["model=transformer", f"data.train_files=[{prefix}]", f"data.tokenizer.path={tmp_path / 'words.json'}",
                 f"data.cache_dir={tmp_path / 'cache'}", "data.shard_bytes=4096", "data.num_proc=1",
                 "data.max_seq_len=64", "data.max_tokens=256", f"data.store={tmp_path / 'killed'}"]  # fmt: skip
    command = [sys.executable, "-m", "plm_toolkit.commands.prepare", *overrides]
    killed = subprocess.run(command, cwd=tmp_path, env={**os.environ, KILL_AFTER: "2"}, capture_output=True)
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    assert len(list((tmp_path / "killed" / "train").glob("*.idx"))) == 2
    resumed = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    summary = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert summary["unit"] == "pairs" and summary["splits"]["train"]["documents"] == 500
    assert shard_digests(tmp_path / "killed") == shard_digests(fresh)
    assert len(shard_digests(fresh)) > 6
