from pathlib import Path

from plm_toolkit.config.reference import render

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_config_reference_is_current():
    assert DOC.read_text() == render(), "regenerate: python -m plm_toolkit.config.reference > docs/configuration.md"


def test_every_field_is_documented():
    undocumented = [line for line in render().splitlines() if line.startswith("| `") and line.endswith("|  |")]
    assert undocumented == []
