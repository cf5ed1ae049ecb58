"""Were a section's committed rows made by the current code of the files it depends on?

Current when the last commit that touched the section's dependencies is an ancestor of (or equal to)
the commit of the section's newest row; otherwise stale since that commit.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from results_tables.rows import card

from runbook.sections import Section
from runbook.steps import ROOT


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=30)


def last_change(deps: tuple[str, ...], repo: Path = ROOT) -> tuple[str, str] | None:
    """(sha, subject) of the newest commit touching DEPS, None outside a git checkout."""
    done = _git(repo, "log", "-1", "--format=%H%x09%s", "--", *deps)
    if done.returncode or not done.stdout.strip():
        return None
    sha, _, subject = done.stdout.strip().partition("\t")
    return sha, subject


def _newest(rows: list[dict]) -> dict:
    """The newest row by its timestamp (rows without one count as oldest, then file order)."""
    ordered = sorted(enumerate(rows), key=lambda pair: ((pair[1].get("timestamp_utc") or "")[:19], pair[0]))
    return ordered[-1][1]


def _when_and_where(row: dict) -> str:
    """", 2026-12-07, H200": the day and card of a row, where it says them (a rerun's rows should come from
    the card the tables compare on, and old rows from other days stand out)."""
    parts = [(row.get("timestamp_utc") or "")[:10], card(row) if row.get("device_name") else ""]
    return "".join(f", {part}" for part in parts if part)


def status(section: Section, results: Path, repo: Path = ROOT) -> str:
    rows = [row for output in section.outputs for row in output.rows(results)]
    if not rows:
        return "no rows"
    newest = _newest(rows)
    made = (newest.get("git_sha") or "").removesuffix("-dirty")
    about = (" with uncommitted changes" if (newest.get("git_sha") or "").endswith("-dirty") else "") + \
        _when_and_where(newest)
    if not made:
        return f"{len(rows)} rows, the newest without a commit (made before rows carried one)"
    change = last_change(section.deps, repo)
    if change is None:
        return f"{len(rows)} rows of {made}{about} (no git history here to compare with)"
    if _git(repo, "cat-file", "-e", f"{made}^{{commit}}").returncode:
        return f"{len(rows)} rows of {made}{about}, a commit this history does not hold"
    if _git(repo, "merge-base", "--is-ancestor", change[0], made).returncode == 0:
        return f"current ({len(rows)} rows, newest of {made}{about})"
    return f"stale since {change[0][:12]} {change[1][:70]} (newest row of {made}{about})"
