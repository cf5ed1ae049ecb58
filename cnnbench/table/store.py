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
import tempfile
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


def lock_path(results_csv: Path) -> Path:
    """Appends to ``runs.csv`` are serialised by an exclusive lock on ``runs.csv.lock``."""
    return results_csv.with_name(results_csv.name + ".lock")


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
    with open(lock_path(path), "a") as lock, _signals_held():
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


def check_appendable(path: Path, header: Sequence[str] = COLUMN_NAMES) -> None:
    """Refuse, before any run starts, a results file that could not take the rows: one of another
    format or damaged, or one that cannot be written (with its ``.lock`` and ``.history.csv``) because
    a file stands where a folder is needed, the place is read-only, or it is a folder. A missing
    parent folder is created. Every command that appends rows calls this before launching anything."""
    for target in (path, lock_path(path), history_path(path)):
        _check_writable(target)
    _check_existing(path, header)


def _check_writable(target: Path) -> None:
    if target.is_dir():
        raise ResultsFileError(f"{target}: is a folder; expected a CSV file")
    if target.exists():
        try:
            with open(target, "ab"):  # opening for append changes nothing
                pass
        except OSError as exc:
            raise ResultsFileError(f"{target}: cannot be written ({exc.strerror})") from None
        return
    folder = target.parent
    blocking = next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise ResultsFileError(f"{target}: cannot create its folder: {blocking} is a file, not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=f".{target.name}.", suffix=".check"):
            pass  # a file can be created (and removed) there
    except OSError as exc:
        raise ResultsFileError(f"{target}: cannot create files in {folder} ({exc.strerror})") from None


def append_rows(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    append_table(path, COLUMN_NAMES, rows, format_cell)


def _history_cell(name: str, value: Any) -> str:
    if value is None:
        return ""
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def append_history(results_csv: Path, run_id: str, history: Sequence[dict[str, Any]]) -> None:
    rows = [{"run_id": run_id, **entry} for entry in history]
    append_table(history_path(results_csv), HISTORY_COLUMNS, rows, _history_cell)


def write_new_table(path: Path, header: Sequence[str], rows: Sequence[dict[str, Any]],
                    formatter=lambda name, value: "" if value is None else str(value)) -> None:
    """Write a file that only this process writes, without a lock: a temporary file renamed over it
    (atomic on NFS and Lustre too, where a lock may be node-local or refused)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, _render(header, rows, True, formatter))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def write_rows_file(path: Path, rows: Sequence[dict[str, Any]], history: Sequence[dict[str, Any]] = ()) -> None:
    """One job's own results file (and its history next to it), written whole; see :func:`write_new_table`.
    The history first: a reader that sees the row (cnnbench.cluster.ledger merges each row once) must find
    its history there too."""
    if history:
        run_id = rows[0]["run_id"]
        write_new_table(history_path(path), HISTORY_COLUMNS, [{"run_id": run_id, **e} for e in history],
                        _history_cell)
    write_new_table(path, COLUMN_NAMES, rows, format_cell)


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
            if list(frame.columns) == list(HISTORY_COLUMNS):
                raise ResultsFileError(f"{path}: a per-epoch history file, not a results file (it is read with "
                                       f"{results_path_of(path)})")
            more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            raise ResultsFileError(f"{path}: not a cnnbench results file: missing required columns "
                                   f"{', '.join(missing[:3])}{more}")
        frame["source_file"] = str(path)
        frames.append(frame)
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(required))
    for name in COLUMN_NAMES:
        if name in frame.columns:
            frame[name] = [parse_cell(name, v) for v in frame[name]]
            frame[name] = pd.Series(frame[name].tolist(), dtype=_dtype(name), index=frame.index)
    return frame


def _older_version(header: list[str]) -> int | None:
    """The schema version whose header this is when it is not the current header, else None (a file of
    the current version written before ADDED_SINCE_LAST_VERSION counts as older too)."""
    found = [v for v in range(1, SCHEMA_VERSION + 1) if list(columns_of_version(v)) == header]
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


def results_path_of(history_csv: Path) -> Path:
    """Inverse of history_path: ``runs.history.csv`` -> ``runs.csv``."""
    return history_csv.with_name(history_csv.name.removesuffix(".history.csv") + ".csv")


def is_history_file(path: Path) -> bool:
    """A per-epoch history file, recognised by its header (whatever its name)."""
    try:
        with path.open(newline="") as handle:
            return next(csv.reader(handle), []) == list(HISTORY_COLUMNS)
    except (OSError, UnicodeDecodeError):
        return False


def split_history_files(paths: Sequence[Path]) -> tuple[list[Path], list[str]]:
    """(the results files among ``paths``, one line for each history file among them): a shell glob
    such as ``results/*.csv`` takes in the history files written beside the results files; each is
    read with its results file (for the accuracy-vs-time curves) or skipped when that is not given."""
    results = [p for p in map(Path, paths) if not is_history_file(p)]
    notes = []
    for path in map(Path, paths):
        if path in results:
            continue
        owner = results_path_of(path)
        if owner in results:
            notes.append(f"{path}: per-epoch history of {owner}, read with it")
        else:
            notes.append(f"{path}: per-epoch history file, skipped (its results file {owner} is not given)")
    return results, notes


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
