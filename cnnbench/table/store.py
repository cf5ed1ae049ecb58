"""Appending rows safely and reading many result CSVs into one pandas frame.

Appends take an exclusive lock on ``<file>.lock`` and write all new lines with one ``write`` call
on a file opened in append mode, with SIGINT/SIGTERM held back meanwhile: a row is either all
there or not at all, also with several ``cnnbench`` processes appending at once or a Ctrl-C.
A file whose header differs from ours (another schema version, another tool) is never appended to.
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import io
import os
import signal
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cnnbench.errors import ResultsFileError
from cnnbench.table.schema import (
    COLUMN_NAMES,
    CONVERTERS,
    SCHEMA_VERSION,
    columns_of_version,
    format_cell,
    parse_cell,
)

if TYPE_CHECKING:
    import pandas as pd

HISTORY_COLUMNS = ("run_id", "epoch", "wall_s", "train_loss", "test_loss", "test_accuracy")


def history_path(results_csv: Path) -> Path:
    """Per-epoch history lives next to the runs CSV: ``runs.csv`` -> ``runs.history.csv``."""
    return results_csv.with_name(results_csv.stem + ".history.csv")


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _render(header: Sequence[str], rows: Iterable[dict[str, Any]], with_header: bool,
            formatter) -> bytes:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    if with_header:
        writer.writerow(header)
    for row in rows:
        writer.writerow([formatter(name, row.get(name)) for name in header])
    return buffer.getvalue().encode()


def _check_existing(path: Path, header: Sequence[str]) -> bool:
    """True when the file exists with our header; raises when it holds something else."""
    if not path.exists() or path.stat().st_size == 0:
        return False
    with path.open("rb") as handle:
        first = handle.readline().decode(errors="replace").rstrip("\r\n")
        handle.seek(-1, os.SEEK_END)
        last_byte = handle.read(1)
    if next(csv.reader([first]), []) != list(header):
        raise ResultsFileError(
            f"{path}: its header is not cnnbench's current row format (another schema version or "
            f"another tool's file); write to a new file with --out, or `cnnbench upgrade` an older file"
        )
    if last_byte != b"\n":
        raise ResultsFileError(f"{path}: the last line is incomplete (file damaged); repair it first")
    return True


def append_table(path: Path, header: Sequence[str], rows: Sequence[dict[str, Any]],
                 formatter=lambda name, value: "" if value is None else str(value)) -> None:
    """Append rows (dicts keyed by header names) atomically, writing the header once."""
    if not rows:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    lock_path = path.with_name(path.name + ".lock")
    with open(lock_path, "a") as lock, _signals_held():
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            has_header = _check_existing(path, header)
            payload = _render(header, rows, not has_header, formatter)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                written = os.write(fd, payload)
                if written != len(payload):
                    raise OSError(f"{path}: short write ({written} of {len(payload)} bytes)")
                os.fsync(fd)
            finally:
                os.close(fd)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def check_appendable(path: Path) -> None:
    """Refuse a foreign or damaged results file before any run starts."""
    _check_existing(path, COLUMN_NAMES)


def append_rows(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    append_table(path, COLUMN_NAMES, rows, format_cell)


def append_history(results_csv: Path, run_id: str, history: Sequence[dict[str, Any]]) -> None:
    rows = [{"run_id": run_id, **entry} for entry in history]
    append_table(history_path(results_csv), HISTORY_COLUMNS, rows,
                 lambda name, value: "" if value is None else (f"{value:.6g}" if isinstance(value, float)
                                                               else str(value)))


def upgrade_file(path: Path) -> int:
    """Rewrite a results file of an older schema version in the current format (new columns empty);
    returns the rows rewritten, 0 when the file is already current. Atomic: a new file replaces the old."""
    if not path.is_file():
        raise ResultsFileError(f"{path}: no such results file")
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        rows = list(reader)
    if header == list(COLUMN_NAMES):
        return 0
    version = _older_version(header)
    if version is None:
        raise ResultsFileError(f"{path}: not a results file of schema version 1 to {SCHEMA_VERSION}; not changed")
    rows = _converted(rows, version)
    typed = [{**{k: parse_cell(k, v) for k, v in row.items()}, "schema_version": SCHEMA_VERSION} for row in rows]
    tmp = path.with_name(path.name + ".upgrade.tmp")
    tmp.write_bytes(_render(COLUMN_NAMES, typed, True, format_cell))
    os.replace(tmp, path)
    return len(rows)


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of one results CSV as typed dicts (no pandas needed)."""
    with path.open(newline="") as handle:
        return [{k: parse_cell(k, v) for k, v in row.items()} for row in csv.DictReader(handle)]


def read_results(paths: Sequence[Path | str], required: Sequence[str] = COLUMN_NAMES) -> pd.DataFrame:
    """Many results CSVs -> one frame with typed columns; a file missing columns is an error."""
    import pandas as pd

    frames = []
    for path in map(Path, paths):
        if not path.is_file():
            raise ResultsFileError(f"{path}: no such results file")
        try:
            frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError) as exc:
            raise ResultsFileError(f"{path}: not a readable CSV ({type(exc).__name__})") from None
        version = _older_version(list(frame.columns))
        if version is not None:  # an older schema: read as `cnnbench upgrade` would rewrite it
            frame = _upgraded_frame(frame, version)
        missing = [c for c in required if c not in frame.columns]
        if missing:
            raise ResultsFileError(f"{path}: missing required columns: {', '.join(missing)}")
        frame["source_file"] = str(path)
        frames.append(frame)
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(required))
    for name in COLUMN_NAMES:
        if name in frame.columns:
            frame[name] = [parse_cell(name, v) for v in frame[name]]
            frame[name] = pd.Series(frame[name].tolist(), dtype=_dtype(name), index=frame.index)
    return frame


def _older_version(header: list[str]) -> int | None:
    """The schema version (< current) whose header this is, else None."""
    found = [v for v in range(1, SCHEMA_VERSION) if list(columns_of_version(v)) == header]
    return found[-1] if found and header != list(COLUMN_NAMES) else None


def _converted(rows: list[dict[str, Any]], version: int) -> list[dict[str, Any]]:
    """Rows of a file written by ``version``, with the values whose meaning changed since converted."""
    for converted_in, convert in sorted(CONVERTERS.items()):
        if version < converted_in:  # the file predates this change of meaning
            rows = [convert(dict(row)) for row in rows]
    return rows


def _upgraded_frame(frame: pd.DataFrame, version: int) -> pd.DataFrame:
    import pandas as pd

    rows = _converted(frame.to_dict("records"), version)

    upgraded = pd.DataFrame(rows, columns=list(frame.columns), dtype=str)
    for name in COLUMN_NAMES:
        if name not in upgraded.columns:
            upgraded[name] = ""
    return upgraded[list(COLUMN_NAMES)]


def _dtype(name: str) -> str:
    from cnnbench.table.schema import column

    kind = column(name).kind
    return {int: "Int64", float: "Float64", bool: "boolean"}.get(kind, "object")


def read_history(results_csv: Path) -> pd.DataFrame:
    import pandas as pd

    path = history_path(results_csv)
    if not path.is_file():
        return pd.DataFrame(columns=list(HISTORY_COLUMNS))
    return pd.read_csv(path, dtype={"run_id": str})
