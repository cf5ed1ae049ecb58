"""`cnnbench report results/*.csv`: history files among the CSVs are recognised by their columns and
read with their results file or skipped with one line; files of an older row format are read; any
other file gets one short line."""

from __future__ import annotations

import pytest
from conftest import REPO, run_cli

from cnnbench.errors import ResultsFileError
from cnnbench.table import store
from cnnbench.table.schema import COLUMN_NAMES, SCHEMA_VERSION

COMMITTED = sorted((REPO / "results").glob("*.csv"))


def test_the_committed_glob_holds_history_files():
    assert any(p.name.endswith(".history.csv") for p in COMMITTED)


def test_the_committed_results_glob_reads_every_results_file_and_each_history_with_its_owner():
    results, notes = store.split_history_files(COMMITTED)
    history = [p for p in COMMITTED if p.name.endswith(".history.csv")]
    assert set(results) == set(COMMITTED) - set(history)
    assert len(notes) == len(history) and all("read with it" in n for n in notes)
    frame = store.read_results(results)  # older row formats included: added columns empty
    assert set(frame["source_file"]) == set(map(str, results))
    older = frame[frame["schema_version"] < 3]  # rows from before the spread column (schema 3 added it)
    assert len(older) and older["step_time_spread"].isna().all()
    assert frame["schema_version"].max() <= SCHEMA_VERSION


def test_report_on_a_glob_with_a_history_file_uses_it(tmp_path):
    paths = sorted((REPO / "results").glob("quickstart*.csv"))
    done = run_cli("report", *paths, "--out", tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "quickstart.history.csv: per-epoch history of" in done.stderr
    assert (tmp_path / "accuracy_time.png").exists() and (tmp_path / "summary.md").exists()


def test_a_history_file_without_its_results_file_is_skipped_with_one_line(tmp_path):
    results = REPO / "results"
    _, notes = store.split_history_files([results / "quickstart.history.csv", results / "h200_infer.csv"])
    assert notes == [f"{results / 'quickstart.history.csv'}: per-epoch history file, skipped "
                     f"(its results file {results / 'quickstart.csv'} is not given)"]
    done = run_cli("report", results / "quickstart.history.csv", "--out", tmp_path)
    assert done.returncode == 2 and "only per-epoch history files" in done.stderr


def test_a_file_that_is_neither_gets_one_short_line(tmp_path):
    foreign = tmp_path / "theirs.csv"
    foreign.write_text("run_id,backend,time\nx,torch,1\n")
    with pytest.raises(ResultsFileError) as caught:
        store.read_results([foreign])
    message = str(caught.value)
    missing = [c for c in COLUMN_NAMES if c not in ("run_id", "backend")]
    assert message == (f"{foreign}: not a cnnbench results file: missing required columns "
                       f"{', '.join(missing[:3])} and {len(missing) - 3} more")


def test_every_committed_results_file_reports_together_and_the_model_less_one_alone(tmp_path):
    """#32.1: `cnnbench report results/*.csv` (the README's example) reports. h200_stack_http.csv has rows
    that measure no model (no compile, strategy, model or precision): it reports alone too. (Each file
    alone was checked once by hand; all of them alone take minutes on a 2-core machine.)"""
    done = run_cli("report", *COMMITTED, "--out", tmp_path / "all")
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "all" / "index.html").is_file() and (tmp_path / "all" / "serve_throughput.svg").is_file()
    from cnnbench.report.train import build_report

    report = build_report([REPO / "results" / "h200_stack_http.csv"], tmp_path / "stack")
    lines = [ln.get_label() for ln in report.figures["serve_throughput"].axes[0].get_lines()]
    assert any(label.startswith("numpy dynamic") for label in lines), lines
