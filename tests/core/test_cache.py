"""The cache folder: an empty PLM_TOOLKIT_CACHE or HOME counts as unset (either once put the cache in the working
directory), and a folder that cannot be written is named before anything is read."""

import os
import pwd

import pytest
from omegaconf import OmegaConf

from plm_toolkit.core.cache import cache_root, default_cache_dir
from plm_toolkit.core.errors import ConfigError


def test_empty_variables_count_as_unset(monkeypatch, tmp_path):
    monkeypatch.setenv("PLM_TOOLKIT_CACHE", str(tmp_path / "mine"))
    assert default_cache_dir() == str(tmp_path / "mine")
    monkeypatch.setenv("PLM_TOOLKIT_CACHE", "")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_cache_dir() == str(tmp_path / ".cache" / "plm_toolkit")
    for home in ("", None):
        monkeypatch.delenv("HOME") if home is None else monkeypatch.setenv("HOME", home)
        assert default_cache_dir() == f"{pwd.getpwuid(os.getuid()).pw_dir}/.cache/plm_toolkit"


def test_an_empty_cache_dir_is_the_default_and_a_file_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("PLM_TOOLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    assert cache_root(OmegaConf.create({"cache_dir": ""})) == tmp_path / "cache"
    resolved = OmegaConf.create({"cache_dir": "${plm_cache_dir:}"})  # the schema's default, as Hydra resolves it
    assert cache_root(resolved) == tmp_path / "cache"
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match=r"data.cache_dir=.*/file/cache: cannot create .*\(Not a directory\)"):
        cache_root(OmegaConf.create({"cache_dir": str(tmp_path / "file" / "cache")}))
