"""The documentation: every relative link resolves, the README stays short and starts with the two
commands, and docs/csv.md is what the schema renders."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from cnnbench.table import doc
from cnnbench.table.schema import COLUMNS

REPO = Path(__file__).resolve().parents[1]
PAGES = sorted([REPO / "README.md", REPO / "benchmarks" / "README.md", *(REPO / "docs").glob("*.md")])

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
# [text](target) and ![alt](target); the text may hold inline code but no nested brackets.
LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def _prose(text: str) -> str:
    """The text without fenced code blocks, where neither links nor headings count."""
    return FENCE.sub("", text)


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: markup dropped, lower case, punctuation removed, spaces to -."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading's anchor, with GitHub's -1, -2 ... suffixes for repeated headings."""
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(_prose(page.read_text())):
        slug = github_slug(heading)
        count = seen.get(slug, 0)
        found.add(slug if count == 0 else f"{slug}-{count}")
        seen[slug] = count + 1
    return found


def broken_links(page: Path) -> list[str]:
    problems = []
    for target in LINK.findall(INLINE_CODE.sub("", _prose(page.read_text()))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.exists():
            problems.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            problems.append(f"{target}: no heading with anchor #{anchor} in {resolved.name}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page: Path) -> None:
    assert not broken_links(page), broken_links(page)


def test_the_link_check_sees_a_missing_file_and_a_missing_heading(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other page\n\n## Is it healthy? (`cnnbench health`)\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[fine](other.md#is-it-healthy-cnnbench-health) [gone](missing.md) [bad anchor](other.md#nope)\n"
        "`[in code](missing-too.md)`\n```\n[in a block](missing-three.md)\n```\n[self](#a-heading)\n## A heading\n")
    assert broken_links(page) == ["missing.md: no such file",
                                  "other.md#nope: no heading with anchor #nope in other.md"]


def test_github_slugs() -> None:
    assert github_slug("Is my parallelism healthy? (`cnnbench health`)") == "is-my-parallelism-healthy-cnnbench-health"
    assert github_slug("Before anything runs: validate, output paths, noisy numbers") == \
        "before-anything-runs-validate-output-paths-noisy-numbers"
    assert github_slug("Data wait, share 0-1 & more") == "data-wait-share-0-1--more"


def test_readme_is_short_and_starts_with_the_two_commands() -> None:
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; topic text belongs under docs/"
    head = lines[:15]
    run = next(i for i, line in enumerate(head) if line.startswith("make run"))
    test = next(i for i, line in enumerate(head) if line.startswith("make test"))
    assert run < test
    assert all(not line.startswith("## ") for line in head[:test]), "the commands come before any section"


def test_csv_page_is_what_the_schema_renders() -> None:
    committed = (REPO / "docs" / "csv.md").read_text()
    assert committed == doc.render(), f"docs/csv.md is stale: run `{doc.COMMAND}`"
    for column in COLUMNS:
        assert f"| `{column.name}` | {column.kind.__name__} |" in committed


def test_csv_page_command_prints_the_page() -> None:
    printed = subprocess.run([sys.executable, "-m", "cnnbench.table.doc"], cwd=REPO, capture_output=True,
                             text=True, timeout=60, check=True).stdout
    assert printed == doc.render()


def test_no_page_cites_a_design_document_outside_the_repository() -> None:
    for page in PAGES:
        assert "DESIGN.md" not in page.read_text(), page
