"""The committed rows as the table builders read them, and the few ways a cell is written.

Rows of one configuration measured more than once: the newest row counts (by timestamp, then file
order), whatever its status, so that a table shows what the current code did last. A cell without a
row says which runbook section makes it; a cell that cannot be measured on the hardware says why.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from runbook import sidefile  # noqa: E402

from cnnbench.table import store  # noqa: E402

Row = dict[str, Any]
NO_TF_GPU = ("not measurable on the GPU host: TensorFlow's CUDA wheels are far over what can be carried there, "
             "and it has no TensorFlow")


def missing(section: str) -> str:
    return f"not measured yet: `benchmarks/gpu.py {section}`"


class Results:
    """The results folder, each file read once."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._read: dict[str, list[Row]] = {}

    def csv(self, name: str) -> list[Row]:
        if name not in self._read:
            path = self.folder / name
            self._read[name] = store.read_rows(path) if path.exists() else []
        return self._read[name]

    def jsonl(self, name: str) -> list[Row]:
        if name not in self._read:
            self._read[name] = sidefile.read(self.folder / name)
        return self._read[name]


def made_at(row: Row) -> str:
    return str(row.get("timestamp_utc") or "")[:19]


def newest(rows: Iterable[Row], key: Callable[[Row], Any]) -> dict[Any, Row]:
    """KEY(row) -> the newest row of that key."""
    found: dict[Any, tuple[tuple[str, int], Row]] = {}
    for index, row in enumerate(rows):
        k = key(row)
        order = (made_at(row), index)
        if k not in found or order >= found[k][0]:
            found[k] = (order, row)
    return {k: row for k, (_, row) in found.items()}


def card(row: Row | None) -> str:
    """The card's short name (H100, H200) from the row's device name: a section may have run on an H100
    as well as on the H200, so tables that gather sections say which card each figure comes from."""
    name = str((row or {}).get("device_name") or "")
    return next((word for word in name.split() if word[:1] in "HABL" and word[1:].isdigit()), name or "—")


def usual_card(rows: Iterable[Row | None]) -> str:
    """The card most of ROWS ran on."""
    cards = Counter(card(r) for r in rows if r and card(r) != "—")
    return cards.most_common(1)[0][0] if cards else "—"


def on_card(text: str, row: Row | None, usual: str) -> str:
    """TEXT, with the row's card after it where that is not USUAL: figures from two cards side by side
    would otherwise read as one comparison."""
    return f"{text} ({card(row)})" if row and card(row) not in (usual, "—") else text  # "—": no card recorded


def cards_note(rows: Iterable[Row | None], usual: str) -> list[str]:
    """A line under a table whose figures come from more than one card."""
    if all(card(r) in (usual, "—") for r in rows if r):
        return []
    return ["", f"A figure followed by a card ran on that card, the others on the {usual}: compare figures of one "
                "card."]


def ok(row: Row | None) -> bool:
    return row is not None and row.get("status", "ok") == "ok"


def number(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "—"
    return f"{value:,.{digits}f}"


def rate(row: Row | None, section: str, field: str = "images_per_sec", digits: int = 0) -> str:
    """A row's figure, its status where it did not finish, or what makes it where there is no row."""
    if row is None:
        return missing(section)
    if not ok(row):
        return failed_cell(row)
    return number(row.get(field), digits)


def failed_cell(row: Row) -> str:
    """What a cell says for a row that did not finish: its status and the first clause of its error."""
    return f"{row.get('status')}: {short_error(row.get('error'))}".rstrip(": ")


def short_error(error: Any, limit: int = 70) -> str:
    """A row's error for a cell: its first clause (the rest is in the row), cut at LIMIT characters."""
    text = str(error or "").split("; ")[0]
    return text if len(text) <= limit else text[:limit - 1] + "…"


def ratio(a: float | None, b: float | None, digits: int = 3) -> str | None:
    return f"{a / b:.{digits}f}" if a and b else None


def share(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{100 * value:.{digits}f}%"


def table(header: list[str], rows: Iterable[list[str]], align: str | None = None) -> list[str]:
    """A markdown table; ALIGN holds one letter per column: l (left) or r (right, the default for figures)."""
    align = align or "l" + "r" * (len(header) - 1)
    marks = ["---" if a == "l" else "---:" for a in align]
    return ["| " + " | ".join(header) + " |", "|" + "|".join(marks) + "|",
            *("| " + " | ".join(cells) + " |" for cells in rows)]


def provenance(files: dict[str, list[Row]]) -> str:
    """Which files, commits and days the shown rows come from (one line under a table)."""
    parts = []
    for name, rows in files.items():
        shas = sorted({str(r.get("git_sha") or "").removesuffix("-dirty")[:8] or "not recorded" for r in rows if r})
        days = sorted({made_at(r)[:10] for r in rows if r and made_at(r)})
        when = f", {days[0]}" + (f" to {days[-1]}" if len(days) > 1 else "") if days else ""
        # the card, since a section may have run on a host other than its file name's (an H100 for an H200)
        cards = sorted({str(r.get("device_name")) for r in rows if r and r.get("device_name")})
        on = f", {' and '.join(cards)}" if cards else ""
        if rows:
            parts.append(f"`results/{name}` (git {', '.join(shas)}{when}{on})")
    return ("Rows: " + "; ".join(parts) + ".") if parts else "No rows yet."
