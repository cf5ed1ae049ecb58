"""Output paths are checked before anything is launched: one line, exit 2, nothing run, nothing written."""

from __future__ import annotations

import pytest
from conftest import TINY_DIGITS, run_cli, write_spec

from cnnbench.errors import ResultsFileError
from cnnbench.table import store

# Synthetic data: the spec is ready at once (no dataset to split), so each refusal takes a second.
TINY = TINY_DIGITS.replace('dataset = "digits"', 'dataset = "synthetic"').replace("epochs = 2", "")
INFER_TABLE = "[infer]\nbatch_sizes = [1]\n"


def _bad_outs(tmp_path):
    (tmp_path / "some_file.toml").write_text("x")
    (tmp_path / "a_folder.csv").mkdir()
    return {
        "file where a folder is needed": (tmp_path / "some_file.toml" / "runs.csv", "is a file, not a folder"),
        "/proc": ("/proc/runs.csv", "cannot create files in /proc"),
        "read-only place": ("/sys/runs.csv", "cannot create files in /sys"),
        "a folder": (tmp_path / "a_folder.csv", "is a folder"),
    }


def _refused(done, expected):
    assert done.returncode == 2, done.stderr[-2000:]
    assert expected in done.stderr and done.stderr.strip().count("\n") == 0, done.stderr
    assert "Traceback" not in done.stderr and "[1/" not in done.stderr  # nothing was launched


@pytest.mark.parametrize("case", ["file where a folder is needed", "/proc", "read-only place", "a folder"])
def test_run_refuses_an_unwritable_out_before_the_first_run(tmp_path, case):
    out, expected = _bad_outs(tmp_path)[case]
    _refused(run_cli("run", write_spec(tmp_path, TINY), "--out", out), expected)


@pytest.mark.parametrize("command", ["sweep", "infer"])
def test_sweep_and_infer_refuse_it_too(tmp_path, command):
    out, expected = _bad_outs(tmp_path)["file where a folder is needed"]
    text = TINY + INFER_TABLE if command == "infer" else TINY
    _refused(run_cli(command, write_spec(tmp_path, text), "--out", out), expected)


def test_a_missing_folder_is_created_and_nothing_else_is_left(tmp_path):
    out = tmp_path / "new" / "deeper" / "runs.csv"
    store.check_appendable(out)
    assert out.parent.is_dir() and list(out.parent.iterdir()) == []


@pytest.mark.parametrize("companion", ["runs.csv.lock", "runs.history.csv"])
def test_the_lock_and_history_files_are_checked_as_well(tmp_path, companion):
    (tmp_path / companion).mkdir()
    with pytest.raises(ResultsFileError, match=f"{companion}: is a folder"):
        store.check_appendable(tmp_path / "runs.csv")
