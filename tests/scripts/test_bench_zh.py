"""scripts/bench_zh.py measures tokens per character and whole-word masking on the bundled Chinese corpus; and
scripts/make_zh_corpus.py rebuilds that corpus from this machine's zh_CN message catalogs."""

import hashlib
import re
from pathlib import Path

import pytest

from plm_toolkit.core.resources import resource_path
from tests.scripts import run_json

CORPUS = Path(resource_path("corpora/zh"))
LOCALE = Path("/usr/share/locale/zh_CN/LC_MESSAGES")


@pytest.mark.slow
def test_whole_words_are_masked_whole_at_fifteen_percent():
    pytest.importorskip("jieba")
    result = run_json("bench_zh.py", "--vocab-size", "2000", "--max-seq-len", "64")
    trained = result["tokens_per_character"]["trained_wordpiece"]
    assert trained["tokens_per_chinese_character"] == 1.0 and 0.5 < trained["tokens_per_character"] < 1.2
    for layout in ("full_sentences", "sentence_pairs"):
        wwm, token = result["whole_word_masking"][layout]["whole_word"], result["whole_word_masking"][layout]["token"]
        assert abs(wwm["share_of_characters_masked"] - 0.15) < 0.005
        assert wwm["chosen_words_masked_whole"] == 1.0 and token["chosen_multi_character_words_masked_whole"] < 0.3
        assert abs(wwm["mask_random_kept"][0] - 0.8) < 0.03


@pytest.mark.skipif(not (LOCALE / "coreutils.mo").is_file(), reason="no zh_CN message catalogs on this machine")
def test_the_corpus_rebuilds_from_the_catalogs(tmp_path):
    result = run_json("make_zh_corpus.py", "--out", tmp_path)
    source = (CORPUS / "SOURCE.md").read_text(encoding="utf-8")
    catalogs = {name: info["mo_sha256"] for name, info in result["catalogs"].items()}
    assert catalogs and all(name.isascii() for name in catalogs)
    same = all(re.search(rf"`{re.escape(name)}\.mo` .*`{digest[:16]}", source) for name, digest in catalogs.items())
    for name in ("train.txt", "valid.txt"):
        built = (tmp_path / name).read_bytes()
        assert len(built) < 200_000 and result[name]["sha256"] == hashlib.sha256(built).hexdigest()
        if same:  # the catalogs SOURCE.md names: the files bundled, byte for byte
            assert built == (CORPUS / name).read_bytes()
