"""README.md and docs/ hold together: every relative link reaches a file that exists and, with #anchor, a heading
of that page (as GitHub names headings); README links every page of docs/ and stays a page read in five minutes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def prose(path: Path) -> str:
    """The page without its code blocks (a shell comment is no heading, a Python index no link)."""
    return FENCE.sub("", path.read_text(encoding="utf-8"))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped (hyphens and underscores kept), spaces to
    hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor; a repeated one also as GitHub numbers it (-1, -2, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for line in prose(path).splitlines():
        if m := re.match(r"#{1,6} (.+)", line):
            name = slug(m.group(1))
            out.add(name if name not in seen else f"{name}-{seen[name]}")
            seen[name] = seen.get(name, 0) + 1
    return out


def links(path: Path) -> list[str]:
    return [t for t in LINK.findall(prose(path)) if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_every_relative_link_reaches_its_file_and_heading(page):
    broken = []
    for target in links(page):
        file, _, anchor = target.partition("#")
        destination = (page.parent / file).resolve() if file else page
        if not destination.exists():
            broken.append(f"{target}: no such file")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            broken.append(f"{target}: no heading #{anchor} in {destination.relative_to(REPO)}")
    assert broken == [], f"{page.relative_to(REPO)}: {broken}"


def test_readme_links_every_docs_page_and_stays_short():
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in links(README)}
    assert [p.name for p in PAGES[1:] if p.resolve() not in linked] == []
    assert len(README.read_text(encoding="utf-8").splitlines()) < 250


def test_headings_become_githubs_anchors():
    assert slug("Knowledge masking (ERNIE)") == "knowledge-masking-ernie"
    assert slug("Export: plm-export") == "export-plm-export"
    assert slug("Where a run's outputs go") == "where-a-runs-outputs-go"
    assert slug("`hardware.unpad` and T5") == "hardwareunpad-and-t5"
