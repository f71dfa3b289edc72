"""The install ships every package and data folder: pyproject.toml's list matches the tree (a folder left out of it
is missing from a wheel, and setuptools warns about it on every install)."""

from __future__ import annotations

from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def folders_with(base: Path, package: str, pattern: str) -> set[str]:
    found = set()
    for path in base.rglob(pattern):
        if "__pycache__" in path.parts:
            continue
        relative = path.parent.relative_to(base).parts
        found.add(".".join((package, *relative)))
    return found


def test_every_package_and_data_folder_is_listed():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    expected = folders_with(ROOT / "plm_toolkit", "plm_toolkit", "*.py")
    expected |= folders_with(ROOT / "plm_toolkit" / "corpora", "plm_toolkit.corpora", "*.*")
    expected |= folders_with(ROOT / "configs", "plm_toolkit.configs", "*.yaml")
    assert sorted(expected - listed) == [], "add these to [tool.setuptools] packages in pyproject.toml"
    assert sorted(listed - expected) == [], "pyproject.toml lists packages that do not exist"
