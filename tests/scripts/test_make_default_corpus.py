"""scripts/make_default_corpus.py rebuilds the bundled corpus (plm_toolkit/corpora/wikitext2/) byte for byte from
the WikiText-2 raw test split, so the files the package ships are the ones its SOURCE.md says how to make."""

from pathlib import Path

from plm_toolkit.core.resources import resource_path
from tests.scripts import run_script


def test_the_bundled_corpus_is_what_the_script_makes(shared_data, tmp_path):
    printed = run_script(
        "make_default_corpus.py", "--source", shared_data / "wikitext2" / "wiki.test.raw", "--out", tmp_path
    )
    for split in ("train", "valid"):
        bundled = resource_path(f"corpora/wikitext2/{split}.txt")
        assert (tmp_path / f"{split}.txt").read_bytes() == Path(bundled).read_bytes(), split
    assert str(tmp_path / "train.txt") in printed and str(tmp_path / "valid.txt") in printed
