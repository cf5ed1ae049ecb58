"""JSON-lines side files of the benchmarks (peers, probes, splits): each record stamped with the commit
that made it, so that `benchmarks/gpu.py --list` and the tables can tell which code a figure came from,
as the CSV rows' git_sha column does."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from cnnbench import envinfo


def stamp(record: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """The record with git_sha and the UTC time added (existing keys win over ``extra``, not over the stamp)."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {**extra, **record, "git_sha": envinfo.git_sha(), "timestamp_utc": now}


def append(path: Path, records: Iterable[dict[str, Any]], **extra: Any) -> int:
    """Append the records, stamped, one JSON object per line; returns how many were written."""
    lines = [json.dumps(stamp(r, **extra)) for r in records]
    if lines:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as handle:
            handle.write("\n".join(lines) + "\n")
    return len(lines)


def read(path: Path) -> list[dict[str, Any]]:
    """Every record of a JSON-lines file (a single JSON document counts as one record); none if absent."""
    if not path.exists():
        return []
    text = path.read_text().strip()
    if not text:
        return []
    if text.startswith("{") and "\n{" not in text:
        return [json.loads(text)]
    return [json.loads(line) for line in text.splitlines() if line.strip()]
