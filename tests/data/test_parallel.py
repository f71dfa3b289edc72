"""Parallel text: prefix and JSONL formats, the bad inputs of translation data, caching, token-count batches."""

import json
import logging
import random

import pytest
from omegaconf import OmegaConf

from plm_toolkit.data.parallel import joint_text, read_parallel, resolve, tokenize_pairs
from plm_toolkit.data.token_batches import TokenBatches, token_batches
from plm_toolkit.errors import ConfigError, DataError


def data_cfg(tmp_path, train, validation=(), **extra):
    return OmegaConf.create(
        {
            "train_files": list(train),
            "validation_files": list(validation),
            "source_lang": "en",
            "target_lang": "de",
            "cache_dir": str(tmp_path / "cache"),
            **extra,
        }
    )


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
        pairs = read_parallel(data_cfg(tmp_path, [spec]), "train")
        assert pairs["source"] == en and pairs["target"] == de
    both = read_parallel(data_cfg(tmp_path, [prefix, str(jsonl)]), "train")
    assert both["source"] == en + en
    assert read_parallel(data_cfg(tmp_path, [prefix]), "validation") is None


def test_different_line_counts_name_both_files_and_counts(tmp_path):
    prefix = write_prefix(tmp_path, "train", ["a", "b", "c"], ["x", "y"])
    with pytest.raises(DataError) as err:
        read_parallel(data_cfg(tmp_path, [prefix]), "train")
    message = str(err.value)
    assert f"{prefix}.en has 3 lines" in message and f"{prefix}.de has 2" in message
    prefix = write_prefix(tmp_path, "other", ["a"], ["x", "y", "z"])
    with pytest.raises(DataError, match=r"other\.en has 1 lines but .*other\.de has 3"):
        read_parallel(data_cfg(tmp_path, [prefix]), "train")


def test_empty_lines_are_skipped_and_counted(tmp_path, caplog):
    prefix = write_prefix(tmp_path, "train", ["one", "", "three", "four"], ["eins", "zwei", "  ", "vier"])
    with caplog.at_level(logging.WARNING, logger="plm_toolkit"):
        pairs = read_parallel(data_cfg(tmp_path, [prefix]), "train")
    assert pairs["source"] == ["one", "four"]
    assert "skipped 2 of 4 pairs with an empty source or target line" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="plm_toolkit"):
        read_parallel(data_cfg(tmp_path, [prefix]), "train")  # from the cache: still counted
    assert "skipped 2 of 4" in caplog.text


def test_jsonl_row_without_a_language_key_names_file_and_line(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text('{"en": "a", "de": "b"}\n\n{"en": "c", "fr": "d"}\n')
    with pytest.raises(DataError, match=rf"{path}:3: no key 'de' \(data.target_lang\); the row has 'en', 'fr'"):
        read_parallel(data_cfg(tmp_path, [str(path)]), "train")
    path.write_text('{"en": "a", "de": "b"}\n[1, 2]\n')
    with pytest.raises(DataError, match=rf"{path}:2: expected a JSON object"):
        read_parallel(data_cfg(tmp_path, [str(path)]), "train")
    path.write_text('{"en": "a", "de": 3}\n')
    with pytest.raises(DataError, match=rf"{path}:1: 'de' is a number; expected a string"):
        read_parallel(data_cfg(tmp_path, [str(path)]), "train")


def test_missing_files_and_a_language_file_given_as_prefix(tmp_path):
    prefix = write_prefix(tmp_path, "train", ["a"], ["b"])
    with pytest.raises(DataError, match=r"train\.en is a file: give its prefix"):
        resolve(prefix + ".en", "en", "de")
    with pytest.raises(DataError, match=r"missing: .*nothere\.en, .*nothere\.de"):
        resolve(str(tmp_path / "nothere"), "en", "de")
    with pytest.raises(ConfigError, match="both 'en'"):
        read_parallel(data_cfg(tmp_path, [prefix], target_lang="en"), "train")


def test_long_sentences_are_cut_with_a_counted_warning(tmp_path, caplog):
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["w0", "w1", "w2", "w3", "w4", "w5", "w6", "w7", "[UNK]"]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    prefix = write_prefix(tmp_path, "train", ["w1 w2", "w1 w2 w3 w4 w5 w6"], ["w3", "w1 w2 w3 w4 w5"])
    cfg = data_cfg(tmp_path, [prefix])
    with caplog.at_level(logging.WARNING, logger="plm_toolkit"):
        ids = tokenize_pairs(read_parallel(cfg, "train"), tokenizer, 5, cfg, "train")
    assert ids["source_ids"] == [[1, 2], [1, 2, 3, 4]]
    assert ids["target_ids"] == [[3], [1, 2, 3, 4]]
    assert ids["index"] == [0, 1]
    assert "cut 1 source and 1 target sentences of 2 pairs to 4 tokens" in caplog.text


def test_joint_text_holds_both_sides(tmp_path):
    prefix = write_prefix(tmp_path, "train", ["a b", "c"], ["x", "y z"])
    assert joint_text(read_parallel(data_cfg(tmp_path, [prefix]), "train"))["text"] == ["a b", "c", "x", "y z"]


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


def test_token_batches_item_is_a_list_of_rows():
    rows = [{"source_ids": [1] * n} for n in (3, 1, 2, 3)]
    batched = TokenBatches(rows, token_batches([3, 1, 2, 3], [1, 1, 1, 1], max_tokens=6))
    assert batched.num_rows() == 4
    assert [[len(r["source_ids"]) for r in batched[i]] for i in range(len(batched))] == [[1, 2], [3, 3]]
