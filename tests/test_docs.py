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


NUMBER = re.compile(r"(?<![\w.])[+-]?\d+(?:\.\d+)?(?:e[+-]?\d+)?")


def unquoted_numbers(section: str, report: str) -> list[str]:
    """The numbers of ``section`` that the report does not print (its own figures, signs included)."""
    return [n for n in NUMBER.findall(section) if n not in report]


def guidance(page: Path) -> str:
    """The advice section of docs/topology.md, up to the next heading of its level."""
    text = page.read_text()
    start = text.index("\n## What to choose")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else None]


def test_the_topology_advice_quotes_only_the_reports_numbers():
    """Issue 43: the guidance on the graph and t quotes only numbers the generated report prints,
    so a report regenerated from other runs cannot leave the advice behind unnoticed."""
    report = (ROOT / "results" / "REPORT.md").read_text()
    assert unquoted_numbers(guidance(ROOT / "docs" / "topology.md"), report) == []


def test_the_quote_check_sees_a_number_the_report_lacks():
    assert unquoted_numbers("Dadam3 wins by -12.5 FID [-20.1, -4.9] on 5 seeds", "x -12.5 [-20.1 y 5") == ["-4.9"]
