"""scripts/make_ud_slice.py rebuilds the bundled UD English-EWT slice (plm_toolkit/corpora/ud_ewt/) byte for byte from a
clone of UD_English-EWT at the commit its SOURCE.md names, so the files the package ships are the ones it says how to
make. The clone is found at $UD_EWT_REPO, else where this workplace mirrors it; without one the test skips."""

import hashlib
import json
import os
from pathlib import Path

import pytest

from plm_toolkit.core.resources import resource_path
from tests.scripts import run_script

REVISION = "15d613d8447b3478787d4c278730a1e48a945efb"
MIRROR = Path("/work/.mirror/UniversalDependencies+UD_English-EWT/repo")


@pytest.mark.slow
def test_the_bundled_slice_is_what_the_script_makes(tmp_path):
    repository = Path(os.environ.get("UD_EWT_REPO", MIRROR))
    if not repository.is_dir():
        pytest.skip(f"no UD_English-EWT clone at {repository} (set UD_EWT_REPO)")
    report = json.loads(run_script("make_ud_slice.py", repository, "--revision", REVISION, "--out", tmp_path))
    assert report["revision"] == REVISION
    source = Path(resource_path("corpora/ud_ewt/SOURCE.md")).read_text(encoding="utf-8")
    for split in ("train", "dev"):
        bundled = Path(resource_path(f"corpora/ud_ewt/{split}.conllu")).read_bytes()
        assert (tmp_path / f"{split}.conllu").read_bytes() == bundled, split
        digest = hashlib.sha256(bundled).hexdigest()
        assert report[split]["sha256"] == digest and digest in source, split
    assert (report["train"]["sentences"], report["dev"]["sentences"]) == (2000, 1000)
