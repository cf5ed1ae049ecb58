"""The CSV: atomic appends, concurrent writers, foreign headers, typed reading."""

from __future__ import annotations

import csv
import multiprocessing
from pathlib import Path

import pytest

from cnnbench.errors import ResultsFileError
from cnnbench.table import store
from cnnbench.table.schema import COLUMN_NAMES, COLUMNS


def _row(i: int) -> dict:
    return {"schema_version": 1, "run_id": f"r{i}", "backend": "torch", "devices": 2, "status": "ok",
            "images_per_sec": 1234.5 + i, "error": "multi\nline, with comma", "compile": True}


def _append_many(path: str, start: int) -> None:
    for i in range(start, start + 40):
        store.append_rows(Path(path), [_row(i)])


def test_append_writes_header_once_and_roundtrips(tmp_path):
    path = tmp_path / "r.csv"
    store.append_rows(path, [_row(0)])
    store.append_rows(path, [_row(1), _row(2)])
    lines = path.read_text().splitlines()
    assert lines[0].split(",") == list(COLUMN_NAMES)
    assert len(lines) == 4
    rows = store.read_rows(path)
    assert rows[1]["images_per_sec"] == pytest.approx(1235.5) and rows[1]["compile"] is True
    assert rows[0]["error"] == "multi line, with comma"  # one physical line per row
    frame = store.read_results([path])
    assert list(frame["devices"]) == [2, 2, 2] and frame["images_per_sec"].dtype == "Float64"


def test_concurrent_writers_lose_nothing(tmp_path):
    path = tmp_path / "r.csv"
    procs = [multiprocessing.get_context("spawn").Process(target=_append_many, args=(str(path), k * 100))
             for k in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    with path.open(newline="") as handle:
        lines = list(csv.reader(handle))
    assert lines[0] == list(COLUMN_NAMES)
    assert len(lines) == 1 + 160
    assert all(len(line) == len(COLUMNS) for line in lines)
    assert len({line[1] for line in lines[1:]}) == 160


def test_foreign_header_is_refused(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("a,b,c\n1,2,3\n")
    before = path.read_bytes()
    with pytest.raises(ResultsFileError, match="header"):
        store.append_rows(path, [_row(0)])
    assert path.read_bytes() == before


def test_torn_last_line_is_refused(tmp_path):
    path = tmp_path / "r.csv"
    store.append_rows(path, [_row(0)])
    with path.open("a") as handle:
        handle.write("1,partial")
    with pytest.raises(ResultsFileError, match="incomplete"):
        store.append_rows(path, [_row(1)])


def test_read_results_missing_columns(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("run_id,backend\nx,torch\n")
    with pytest.raises(ResultsFileError, match="missing required columns"):
        store.read_results([path])


def test_history_next_to_runs(tmp_path):
    path = tmp_path / "runs.csv"
    store.append_history(path, "abc", [{"epoch": 1, "wall_s": 1.5, "train_loss": 0.3, "test_loss": 0.2,
                                          "test_accuracy": 0.9}])
    frame = store.read_history(path)
    assert (tmp_path / "runs.history.csv").exists() and list(frame["run_id"]) == ["abc"]


def test_a_version_1_file_is_upgraded_in_place_and_can_then_be_appended_to(tmp_path):
    from cnnbench.table.schema import SCHEMA_VERSION, columns_of_version

    old_header = list(columns_of_version(1))
    path = tmp_path / "old.csv"
    path.write_text(",".join(old_header) + "\n" + ",".join("1" if c == "schema_version" else
                                                           ("abc" if c == "run_id" else "") for c in old_header) + "\n")
    with pytest.raises(ResultsFileError, match="cnnbench upgrade"):
        store.check_appendable(path)
    assert store.upgrade_file(path) == 1
    (row,) = store.read_rows(path)
    assert row["run_id"] == "abc" and row["schema_version"] == SCHEMA_VERSION and row["variant"] is None
    store.append_rows(path, [{"run_id": "def", "schema_version": SCHEMA_VERSION}])
    assert [r["run_id"] for r in store.read_rows(path)] == ["abc", "def"]
    assert store.upgrade_file(path) == 0  # already current


def test_upgrade_turns_an_integer_image_size_into_height_x_width(tmp_path):
    from cnnbench.table.schema import columns_of_version

    header = list(columns_of_version(2))
    values = {"schema_version": "2", "run_id": "sq", "image_size": "224"}
    path = tmp_path / "v2.csv"
    path.write_text(",".join(header) + "\n" + ",".join(values.get(c, "") for c in header) + "\n")
    # read as it is (the report and notebooks read committed older files), then rewritten
    assert list(store.read_results([path])["image_size"]) == ["224x224"]
    assert store.upgrade_file(path) == 1
    (row,) = store.read_rows(path)
    assert row["image_size"] == "224x224" and row["data_wait_share"] is None


def test_a_file_of_this_version_written_before_its_newest_columns_is_read_and_upgraded(tmp_path, monkeypatch):
    """Columns added since the last version bump (as skipped_inputs was before schema 4): files of the
    current version written before them are read, refused for appending, and upgraded."""
    from cnnbench.table import schema
    from cnnbench.table.schema import COLUMN_NAMES, SCHEMA_VERSION

    monkeypatch.setattr(schema, "ADDED_SINCE_LAST_VERSION", ("skipped_inputs",))
    monkeypatch.setattr(schema, "ADDED_IN", {v: tuple(c for c in names if c != "skipped_inputs")
                                            for v, names in schema.ADDED_IN.items()})
    assert COLUMN_NAMES[-1] == "skipped_inputs"
    header = [c for c in COLUMN_NAMES if c not in schema.ADDED_SINCE_LAST_VERSION]
    values = {"schema_version": str(SCHEMA_VERSION), "run_id": "before", "status": "ok"}
    path = tmp_path / "current.csv"
    path.write_text(",".join(header) + "\n" + ",".join(values.get(c, "") for c in header) + "\n")
    frame = store.read_results([path])
    assert list(frame["run_id"]) == ["before"] and frame["skipped_inputs"].isna().all()
    with pytest.raises(ResultsFileError, match="cnnbench upgrade"):
        store.check_appendable(path)
    assert store.upgrade_file(path) == 1
    store.append_rows(path, [{"run_id": "after", "schema_version": SCHEMA_VERSION, "skipped_inputs": 2}])
    assert [r["skipped_inputs"] for r in store.read_rows(path)] == [None, 2]
