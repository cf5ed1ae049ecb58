"""Runs a list of runs one after another, appending each row as soon as it exists."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cnnbench import envinfo
from cnnbench.errors import error_line
from cnnbench.expand import not_supported
from cnnbench.infer.rows import infer_rows, skipped_variant_row
from cnnbench.registry import REGISTRY
from cnnbench.rows import FIRST_SKIPPED
from cnnbench.run.launch import launch
from cnnbench.run.rows import outcome_row, skipped_row
from cnnbench.runs import InferRun, Outcome, Run, Variant
from cnnbench.table import store
from cnnbench.table.schema import CONFIG_KEY
from cnnbench.table.spread import DEFAULT_SPREAD_LIMIT, noisy_note


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _summary(row: dict[str, Any], limit: float = DEFAULT_SPREAD_LIMIT) -> str:
    if row["status"] == "ok" and row.get("images_per_sec") is None:
        return "ok (host 0 writes the row)"
    if row["status"] != "ok":
        text = f"{row['status']}: {error_line(row['error'] or 'no error recorded')}"
        return "; ".join(filter(None, [text, skipped_note(row)]))
    text = f"ok {row['images_per_sec']:.0f} img/s, first step {row['first_step_s']:.1f} s"
    if row.get("test_accuracy") is not None:
        text += f", accuracy {row['test_accuracy']:.3f}"
    notes = [noisy_note(row.get("step_time_spread"), limit), skipped_note(row)]
    return "; ".join([text, *filter(None, notes)])


def skipped_note(row: dict[str, Any]) -> str | None:
    """'skipped 2 corrupt input(s), the first: <file>: <why>' for a row whose loaders skipped inputs."""
    first = row.get(FIRST_SKIPPED)
    return f"skipped {row['skipped_inputs']} corrupt input(s), the first: {first}" if first else None


def _missing(run: Run) -> str | None:
    """Why a run cannot start here: its framework (or Keras engine) is not installed."""
    if envinfo.backend_version(run.backend, run.strategy) is None:
        return f"{run.backend}/{run.strategy} is not installed; {REGISTRY[run.backend].install_hint}"
    return None


def _launch(run: Run, verbose: bool) -> Outcome:
    """Launch the run's process tree; without -v, show the end of the log of a run that crashed (a
    worker that raised names its error in the row and the summary line; -v shows its traceback)."""
    outcome = launch(run, verbose=verbose)
    if outcome.status != "ok" and not verbose and not outcome.worker_reported:
        for line in outcome.log_tail[-15:]:
            _say(f"    | {line}")
    if outcome.skipped_inputs:  # said with or without -v: [data] corrupt = "skip" must not be silent
        files = ", ".join(source for source, _ in outcome.skipped_inputs[:3])
        more = f" and {len(outcome.skipped_inputs) - 3} more" if len(outcome.skipped_inputs) > 3 else ""
        _say(f"warning: skipped {len(outcome.skipped_inputs)} corrupt input(s) ([data] corrupt = \"skip\"): "
             f"{files}{more}")
    return outcome


def execute_one(run: Run, *, verbose: bool = False, peak_tflops: float | None = None
                ) -> tuple[dict[str, Any], list[dict]]:
    """(row, per-epoch history) of one run; a missing framework or feature gives a skipped row."""
    reason = _missing(run) or not_supported(run)
    if reason:
        return skipped_row(run, reason), []
    outcome = _launch(run, verbose)
    return with_health(outcome_row(run, outcome, peak_tflops)), outcome.result.get("history", [])


def with_health(row: dict[str, Any]) -> dict[str, Any]:
    """A profiled row gets its health columns (and health.md next to its trace)."""
    if row.get("profile_path"):
        from cnnbench.report.health import write_for_row

        row.update(write_for_row(row))
    return row


def run_key(row_or_run: Any) -> tuple:
    """What identifies one run of a sweep: the configuration key plus the trial."""
    get = (lambda k: row_or_run.get(k)) if isinstance(row_or_run, dict) else (
        lambda k: row_or_run.device_type if k == "device_type" else getattr(row_or_run, k))
    return tuple(get(k) for k in (*CONFIG_KEY, "trial"))


def split_done(runs: Sequence[Run], out: Path) -> tuple[list[Run], list[Run]]:
    """(runs still to do, runs that already have an ok row in ``out``)."""
    done = set()
    if out.exists() and out.stat().st_size:
        store.check_appendable(out)
        done = {run_key(row) for row in store.read_rows(out) if row.get("status") == "ok"}
    todo = [r for r in runs if run_key(r) not in done]
    return todo, [r for r in runs if run_key(r) in done]


def execute_runs(runs: Sequence[Run], out: Path, *, verbose: bool = False,
                 peak_tflops: float | None = None,
                 on_row: Callable[[int, dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Run each in turn; host 0 appends its row (and history) right after the run ends."""
    store.check_appendable(out)
    rows: list[dict[str, Any]] = []
    begun = time.perf_counter()
    for index, run in enumerate(runs, start=1):
        eta = ""
        if rows:  # the mean duration of the runs so far, times the runs left
            left = (time.perf_counter() - begun) / len(rows) * (len(runs) - index + 1)
            eta = f" (ETA {left / 60:.1f} min)"
        _say(f"[{index}/{len(runs)}]{eta} {run.label} ...")
        started = time.perf_counter()
        row, history = execute_one(run, verbose=verbose, peak_tflops=peak_tflops)
        if run.host_rank == 0:
            store.append_rows(out, [row])
            store.append_history(out, run.run_id, history)
        rows.append(row)
        _say(f"[{index}/{len(runs)}] {_summary(row, run.spread_limit)} ({time.perf_counter() - started:.1f} s)")
        if on_row:
            on_row(index, row)
    return rows


def execute_infer(runs: Sequence[InferRun], skipped: Sequence[tuple[InferRun, Variant, str]], out: Path, *,
                  verbose: bool = False, peak_tflops: float | None = None) -> list[dict[str, Any]]:
    """One worker per backend and precision runs its jobs; its rows are appended when it ends."""
    store.check_appendable(out)
    rows = [skipped_variant_row(run, variant, reason, run.global_batch) for run, variant, reason in skipped]
    if rows:
        store.append_rows(out, rows)
        for row in rows:
            _say(f"skipped {row['backend']} {row['variant']}: {row['error']}")
    for index, run in enumerate(runs, start=1):
        _say(f"[{index}/{len(runs)}] {run.backend} infer {run.model} {run.precision}: "
             f"{len(run.jobs)} job(s) ...")
        started = time.perf_counter()
        reason = _missing(run)
        if reason:
            new = [skipped_variant_row(run, run.jobs[0].variant, reason, run.global_batch)]
        else:
            new = [with_health(row) for row in infer_rows(run, _launch(run, verbose), peak_tflops)]
        store.append_rows(out, new)
        rows += new
        failed = sum(r["status"] == "failed" for r in new)
        _say(f"[{index}/{len(runs)}] {len(new) - failed} ok, {failed} failed ({time.perf_counter() - started:.1f} s)")
        for row in new:
            note = noisy_note(row.get("step_time_spread"), run.spread_limit)
            if note:
                _say(f"    {row['variant']} b{row['global_batch']}: {note}")
    return rows


INFER_TABLE = [("backend", "backend"), ("mode", "mode"), ("variant", "variant"), ("precision", "prec"),
               ("global_batch", "batch"), ("arrival_rate_rps", "req/s"), ("images_per_sec", "img/s"),
               ("step_time_ms_median", "batch ms"), ("latency_ms_p50", "p50 ms"), ("latency_ms_p99", "p99 ms"),
               ("first_step_s", "first s"), ("status", "status")]


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]] | None = None) -> str:
    """A plain-text table of the rows just written."""
    columns = columns or [("backend", "backend"), ("strategy", "strategy"), ("devices", "dev"),
               ("device_type", "device"), ("global_batch", "batch"), ("precision", "prec"),
               ("images_per_sec", "img/s"), ("step_time_ms_median", "step ms"),
               ("first_step_s", "first s"), ("test_accuracy", "acc"), ("status", "status")]

    def cell(row: dict[str, Any], key: str) -> str:
        value = row.get(key)
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:.3f}" if key == "test_accuracy" else f"{value:,.1f}"
        return str(value)

    table = [[title for _, title in columns]] + [[cell(r, k) for k, _ in columns] for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    return "\n".join("  ".join(text.rjust(w) for text, w in zip(line, widths)) for line in table)
