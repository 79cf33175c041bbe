"""The README is a front door (at most 250 lines) and no relative link in README.md, docs/*.md or
the committed results/REPORT.md points to a missing file."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "results" / "REPORT.md"]


def relative_links(page: Path) -> list[str]:
    return [t for t in LINK.findall(page.read_text()) if not re.match(r"^[a-z]+:", t) and not t.startswith("#")]


def test_readme_is_at_most_250_lines():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


def test_docs_exist_and_the_readme_links_each():
    docs = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert docs
    linked = {Path(t.split("#")[0]).name for t in relative_links(ROOT / "README.md")}
    assert set(docs) <= linked


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_to_a_file(page):
    missing = [t for t in relative_links(page) if not (page.parent / t.split("#")[0]).exists()]
    assert not missing, f"{page.relative_to(ROOT)}: {missing}"


def test_link_finder_sees_a_broken_link(tmp_path):
    page = tmp_path / "x.md"
    page.write_text("[ok](x.md) [broken](nope/y.md#a) [web](https://e.org) [anchor](#z)")
    assert relative_links(page) == ["x.md", "nope/y.md#a"]
