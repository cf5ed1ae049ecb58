"""The ledger of submitted Slurm jobs and the rows they leave: merging each job's row file into the results
CSV, and writing the ``failed`` row of a job Slurm ended before it could write its own.

For ``results/runs.csv`` the jobs live in ``results/runs.slurm/``: per run ``<run_id>.sbatch`` (readable,
resubmittable by hand with ``sbatch``), ``<run_id>.run.json`` (the fully resolved run the job trains),
``<run_id>.<jobid>.out`` (the job's log) and ``<run_id>.rows.csv`` (the row the job wrote), plus
``jobs.jsonl``, the ledger of submitted jobs.

A job writes its row into its own file, never into the shared results CSV: several nodes appending
to one file under an fcntl lock is only safe where the shared file system makes locks cluster-wide
(NFS without ``local_lock``, Lustre mounted with ``flock``), which a job cannot check. The submitting
side merges the per-job files into the results CSV (with the usual locked append, on one host) when
it collects: at the end of ``--wait``, and at the start of every ``sweep --slurm``.

A job that Slurm ends before its run wrote a row (TIMEOUT, CANCELLED, NODE_FAIL, OUT_OF_MEMORY,
PREEMPTED, ...) cannot say so itself: its processes are killed, and without an epilog nothing in
the job sees its final state. The submitting side learns it: ``scontrol show job`` while slurmctld
still holds the job (MinJobAge, 300 s by default, after the end), else ``sacct`` where accounting
storage (slurmdbd) is configured. It then writes the ``failed`` row, its ``error`` naming the state.
"""

from __future__ import annotations

import csv
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cnnbench.cluster.sbatch import JobFiles, render_script, resources
from cnnbench.cluster.slurm_jobs import JobState, SlurmError, query_states, submit
from cnnbench.options import SlurmSpec
from cnnbench.runs import Run, run_from_json

# A job that ended by itself (COMPLETED, FAILED) has written its row, but on NFS the submitting host may
# not see the new file for a while (its directory attributes are cached, acdirmax is 60 s by default):
# such a job gets a failed row only when its row is still missing this long after it was seen ended.
# A job Slurm ended (TIMEOUT, CANCELLED, NODE_FAIL, ...) was killed before it could write one.
ROW_GRACE_S = 90.0
ENDED_BY_ITSELF = frozenset({"COMPLETED", "FAILED"})


@dataclass
class TrackedJob:
    job_id: str
    run: Run
    files: JobFiles
    settled: str = ""  # the state it ended in, once its row is in the results file
    ended_seen: float = 0.0  # when it was first seen ended by itself without a row (time.time())

    @property
    def log(self) -> Path:
        return self.files.log(self.job_id)


class Ledger:
    """``jobs.jsonl``: one line per submitted job, one more when its row is in the results CSV."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder.absolute()  # the scripts name their files from any working directory
        self.path = folder / "jobs.jsonl"

    def _append(self, entry: dict[str, Any]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as handle:
            handle.write(json.dumps(entry) + "\n")

    def record_submitted(self, job: TrackedJob) -> None:
        self._append({"job_id": job.job_id, "run_id": job.run.run_id, "label": job.run.label,
                      "submitted_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})

    def record_settled(self, job: TrackedJob, state: str) -> None:
        job.settled = state
        self._append({"job_id": job.job_id, "settled": state})

    def record_ended_seen(self, job: TrackedJob, when: float) -> None:
        job.ended_seen = when
        self._append({"job_id": job.job_id, "ended_seen": when})

    def jobs(self) -> list[TrackedJob]:
        if not self.path.exists():
            return []
        tracked: dict[str, TrackedJob] = {}
        for line in self.path.read_text().splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:  # a line cut by a crash: the job it named is lost to us
                continue
            if "settled" in entry and entry["job_id"] in tracked:
                tracked[entry["job_id"]].settled = entry["settled"]
            elif "ended_seen" in entry and entry["job_id"] in tracked:
                tracked[entry["job_id"]].ended_seen = entry["ended_seen"]
            elif "run_id" in entry:
                files = JobFiles(self.folder, entry["run_id"])
                if files.run_json.exists():
                    tracked[entry["job_id"]] = TrackedJob(entry["job_id"], run_from_json(files.run_json.read_text()),
                                                          files)
        return list(tracked.values())

    def unsettled(self) -> list[TrackedJob]:
        return [job for job in self.jobs() if not job.settled]


# -- collecting rows ----------------------------------------------------------------------------------


def _row_key(row: dict[str, Any]) -> tuple:
    return row.get("run_id"), row.get("slurm_job_id")


def killed_row(job: TrackedJob, state: JobState | None) -> dict[str, Any]:
    """The failed row of a job that ended without writing one."""
    from cnnbench.run.rows import outcome_row
    from cnnbench.runs import Outcome

    if state is None:
        what = ("ended; its state is unknown (slurmctld no longer holds it and no accounting storage "
                "answered)")
    else:
        reason = f", reason {state.reason}" if state.reason and state.reason != "None" else ""
        code = f", exit code {state.exit_code}" if state.exit_code and state.exit_code != "0:0" else ""
        what = f"ended {state.state}{reason}{code}"
    row = outcome_row(job.run, Outcome("failed", error=f"slurm job {job.job_id} {what} before the run wrote "
                                                       f"a row; log {job.log}"))
    row["slurm_job_id"] = job.job_id
    if state and state.nodes and state.nodes != "(null)":
        row["host"] = state.nodes
    return row


def merge_job_rows(folder: Path, out: Path) -> list[dict[str, Any]]:
    """Append every per-job row not yet in ``out`` (and its history); returns the rows appended.
    Keyed by (run_id, slurm_job_id), so a crash between append and bookkeeping appends nothing twice."""
    from cnnbench.table import store

    if not folder.is_dir():
        return []
    present = {_row_key(r) for r in store.read_rows(out)} if out.exists() and out.stat().st_size else set()
    merged = []
    for rows_file in sorted(folder.glob("*.rows.csv")):
        new = [row for row in store.read_rows(rows_file) if _row_key(row) not in present]
        if not new:
            continue
        store.append_rows(out, new)
        history = store.history_path(rows_file)
        if history.exists():
            ids = {row["run_id"] for row in new}
            with history.open(newline="") as handle:
                entries = [e for e in csv.DictReader(handle) if e.get("run_id") in ids]
            for run_id in ids:
                store.append_history(out, run_id, [{k: v for k, v in e.items() if k != "run_id"}
                                                   for e in entries if e["run_id"] == run_id])
        present |= {_row_key(r) for r in new}
        merged += new
    return merged


def _job_has_row(job: TrackedJob) -> bool:
    from cnnbench.table import store

    if not job.files.rows.exists():
        return False
    return any(r.get("slurm_job_id") == job.job_id for r in store.read_rows(job.files.rows))


def row_may_still_show(ledger: Ledger, job: TrackedJob, state: JobState, now: float) -> bool:
    """Whether a job that ended without a visible row may still show one (see ROW_GRACE_S)."""
    if state.state not in ENDED_BY_ITSELF:
        return False
    if not job.ended_seen:
        ledger.record_ended_seen(job, now)
    return now - job.ended_seen < ROW_GRACE_S


def collect(ledger: Ledger, out: Path) -> tuple[list[dict[str, Any]], list[TrackedJob], dict[str, JobState]]:
    """Merge finished jobs' rows into ``out``, write failed rows for jobs Slurm ended without one.
    Returns (rows appended now, jobs still active, the states seen)."""
    from cnnbench.table import store

    pending = ledger.unsettled()
    # The states first, the row files after: a job seen ended has written whatever row it writes.
    states = query_states(job.job_id for job in pending)
    active, killed = [], []
    for job in pending:
        state = states.get(job.job_id)
        if _job_has_row(job):
            ledger.record_settled(job, state.state if state else "ROW")
        elif state is not None and (state.active or row_may_still_show(ledger, job, state, time.time())):
            active.append(job)
        else:
            row = killed_row(job, state)
            store.append_rows(out, [row])
            killed.append(row)
            ledger.record_settled(job, state.state if state else "UNKNOWN")
    return merge_job_rows(ledger.folder, out) + killed, active, states


# -- the sweep ----------------------------------------------------------------------------------------


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def submit_runs(runs: Sequence[Run], options: SlurmSpec, ledger: Ledger, *, repo: Path,
                python: str = sys.executable) -> list[TrackedJob]:
    """Write each run's files and sbatch its script."""
    submitted = []
    for run in runs:
        files = JobFiles(ledger.folder, run.run_id)
        ledger.folder.mkdir(parents=True, exist_ok=True)
        files.run_json.write_text(run.to_json())
        files.script.write_text(render_script(run, options, files, python=python, repo=repo, workdir=Path.cwd()))
        files.script.chmod(0o755)
        job = TrackedJob(submit(files.script), run, files)
        ledger.record_submitted(job)
        submitted.append(job)
        _say(f"submitted slurm job {job.job_id}: {run.label} ({resources(run, options).describe()}) "
             f"-> {files.script}")
    return submitted


def progress_line(jobs: Sequence[TrackedJob], states: dict[str, JobState], rows: Sequence[dict[str, Any]],
                  elapsed_s: float) -> str:
    counts: dict[str, int] = {}
    for job in jobs:
        state = states.get(job.job_id)
        name = state.state.lower() if state else "unknown"
        counts[name] = counts.get(name, 0) + 1
    ok = sum(r["status"] == "ok" for r in rows)
    failed = sum(r["status"] == "failed" for r in rows)
    waiting = ", ".join(f"{n} {name}" for name, n in sorted(counts.items())) or "none"
    return (f"slurm [{elapsed_s / 60:4.1f} min] jobs active: {waiting}; rows collected: {ok} ok, "
            f"{failed} failed")


def follow(ledger: Ledger, out: Path, poll_s: float, sleep: Callable[[float], None] = time.sleep,
           max_failed_polls: int = 30) -> list[dict[str, Any]]:
    """Poll until every job of the ledger has its row in ``out``; a line whenever something changed.
    Slurm not answering for a while (slurmctld restarting) is waited out, up to ``max_failed_polls``."""
    begun, rows, last, failures = time.monotonic(), [], "", 0
    try:
        while True:
            try:
                new, active, states = collect(ledger, out)
            except SlurmError as exc:
                failures += 1
                if failures > max_failed_polls:
                    raise
                _say(f"slurm did not answer ({exc}); asking again in {poll_s:g} s")
                sleep(poll_s)
                continue
            failures = 0
            rows += new
            for row in new:
                _say(f"  row: {row['backend']}/{row['strategy']} x{row['devices']} {row['status']}"
                     f"{': ' + row['error'] if row.get('error') else ''}")
            line = progress_line(active, states, rows, time.monotonic() - begun)
            if line.split("]", 1)[1] != last:
                _say(line)
                last = line.split("]", 1)[1]
            if not active:
                return rows
            sleep(poll_s)
    except KeyboardInterrupt:
        _say("cnnbench: stopped following; the slurm jobs keep running, `sweep --slurm --wait` follows them "
             "again (scancel stops them)")
        raise
