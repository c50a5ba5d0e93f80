"""The README is the front door: short, its two commands first, every page of docs/ linked; and
no relative link in the README or docs/ points at nothing."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_the_readme_is_a_front_door():
    lines = README.read_text().splitlines()
    assert len(lines) <= 150
    assert lines[3].startswith("make demo") and lines[4].startswith("make test")  # the two commands first


def test_the_readme_links_every_page_of_docs():
    linked = set(LINK.findall(README.read_text()))
    assert [
        page.name for page in sorted((REPO / "docs").glob("*.md")) if f"docs/{page.name}" not in linked
    ] == []


def test_every_relative_link_points_at_a_file():
    pages = [
        README,
        REPO / "tests" / "README.md",
        *sorted((REPO / "docs").rglob("*.md")),
        *sorted((REPO / "benchmarks").glob("*.md")),
    ]
    broken = [
        f"{page.relative_to(REPO)}: {target}"
        for page in pages
        for target in LINK.findall(page.read_text())
        if not re.match(r"(https?:|mailto:|#)", target)
        and not (page.parent / target.split("#", 1)[0]).exists()
    ]
    assert broken == []
