"""Sweeps as Slurm batch jobs: one generated sbatch script per run, kept next to the results.

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
import dataclasses
import json
import math
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cnnbench.errors import SpecError, UserError
from cnnbench.options import SlurmSpec
from cnnbench.runs import Run, run_from_json
from cnnbench.spec import check_sbatch_lines

# A job's processes start, import their framework and rendezvous before the run's own timeout_s
# starts counting; the Slurm limit leaves room for that, so that our timeout (which writes a row)
# fires before Slurm's (which kills without one).
START_MARGIN_S = 300.0

# Job states in which the job may still run (or run again); every other state is final.
ACTIVE_STATES = frozenset({
    "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD",
    "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD",
})
SLURM_COMMAND_TIMEOUT_S = 60.0
# A job that ended by itself (COMPLETED, FAILED) has written its row, but on NFS the submitting host may
# not see the new file for a while (its directory attributes are cached, acdirmax is 60 s by default):
# such a job gets a failed row only when its row is still missing this long after it was seen ended.
# A job Slurm ended (TIMEOUT, CANCELLED, NODE_FAIL, ...) was killed before it could write one.
ROW_GRACE_S = 90.0
ENDED_BY_ITSELF = frozenset({"COMPLETED", "FAILED"})


class SlurmError(UserError):
    """A Slurm command is missing or refused the request (sbatch rejected a script, ...)."""


# -- what each run asks of Slurm ----------------------------------------------------------------------


def with_overrides(table: SlurmSpec, **overrides: Any) -> SlurmSpec:
    """The spec's [slurm] table with the command line's options (those not None) on top."""
    given = {name: value for name, value in overrides.items() if value is not None}
    if "extra" in given:
        given["extra"] = table.extra + check_sbatch_lines("--sbatch", "option", tuple(given["extra"]))
    return dataclasses.replace(table, **given)


def place_runs(runs: Sequence[Run], options: SlurmSpec, source: str) -> list[Run]:
    """Each run with its host count: a run of more devices than one node holds spans several."""
    placed = []
    for run in runs:
        per_node = options.devices_per_node or run.devices
        hosts = 1
        if run.devices > per_node:
            if run.devices % per_node:
                raise SpecError(source, "slurm.devices_per_node",
                                f"a run of {run.devices} devices cannot be split into nodes of {per_node}")
            hosts = run.devices // per_node
        if hosts % options.hosts_per_node and hosts > 1:
            raise SpecError(source, "slurm.hosts_per_node",
                            f"{hosts} hosts of a {run.devices}-device run do not fill nodes of "
                            f"{options.hosts_per_node} hosts each")
        placed.append(dataclasses.replace(run, hosts=hosts, host_rank=0, coordinator=""))
    return placed


@dataclass(frozen=True)
class Resources:
    """The #SBATCH resource lines of one run."""

    nodes: int
    tasks_per_node: int
    gpus_per_node: int
    cpus_per_task: int
    time_limit_min: int

    def describe(self) -> str:
        gpus = f", {self.gpus_per_node} GPU(s)/node" if self.gpus_per_node else ""
        return f"{self.nodes} node(s) x {self.tasks_per_node} task(s){gpus}, {self.time_limit_min} min"


def resources(run: Run, options: SlurmSpec) -> Resources:
    tasks_per_node = min(options.hosts_per_node, run.hosts)
    gpus = run.devices_per_host * tasks_per_node if run.device_kind == "gpu" else 0
    minutes = options.time_limit_min or math.ceil((run.timeout_s + START_MARGIN_S) / 60)
    return Resources(nodes=run.hosts // tasks_per_node, tasks_per_node=tasks_per_node, gpus_per_node=gpus,
                     cpus_per_task=options.cpus_per_task, time_limit_min=minutes)


# -- files of one job ---------------------------------------------------------------------------------


def jobs_dir(out: Path) -> Path:
    """``results/runs.csv`` -> ``results/runs.slurm/``."""
    return out.with_name(out.stem + ".slurm")


@dataclass(frozen=True)
class JobFiles:
    folder: Path
    run_id: str

    @property
    def script(self) -> Path:
        return self.folder / f"{self.run_id}.sbatch"

    @property
    def run_json(self) -> Path:
        return self.folder / f"{self.run_id}.run.json"

    @property
    def rows(self) -> Path:
        return self.folder / f"{self.run_id}.rows.csv"

    def log(self, job_id: str | None = None) -> Path:
        return self.folder / f"{self.run_id}.{job_id or '%j'}.out"


def render_script(run: Run, options: SlurmSpec, files: JobFiles, *, python: str, repo: Path,
                  workdir: Path) -> str:
    """The batch script of one run: resources, then one srun task per cnnbench host. It runs in the
    folder `sweep` was started in (relative paths of the spec mean the same), with cnnbench from ``repo``."""
    res = resources(run, options)
    q = shlex.quote
    lines = ["#!/bin/bash",
             f"# cnnbench run {run.run_id}: {run.label}",
             f"# resubmit by hand with: sbatch {q(str(files.script))}",
             f"#SBATCH --job-name=cnnbench-{run.backend}-{run.strategy}-x{run.devices}",
             f"#SBATCH --nodes={res.nodes}",
             f"#SBATCH --ntasks-per-node={res.tasks_per_node}",
             f"#SBATCH --time={res.time_limit_min}",
             f"#SBATCH --output={files.log()}",
             f"#SBATCH --chdir={workdir}",
             # A requeued job would rerun under the same id; a NODE_FAIL row and a resubmission
             # by the next `sweep --slurm` say more.
             "#SBATCH --no-requeue"]
    if res.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={res.gpus_per_node}")
    if res.cpus_per_task:
        lines.append(f"#SBATCH --cpus-per-task={res.cpus_per_task}")
    for name in ("partition", "account", "qos", "constraint"):
        value = getattr(options, name)
        if value:
            lines.append(f"#SBATCH --{name}={value}")
    lines += list(check_sbatch_lines(run.source, "slurm.extra", options.extra))
    # srun does not inherit --cpus-per-task from the allocation (Slurm 22.05's srun(1)): the step says it.
    step_cpus = f" --cpus-per-task={res.cpus_per_task}" if res.cpus_per_task else ""
    lines += ["", "set -euo pipefail",
              f'export PYTHONPATH={q(str(repo))}"${{PYTHONPATH:+:$PYTHONPATH}}"']
    if options.setup:
        lines += ["# [slurm] setup", *options.setup]
    lines += [
        "# The frameworks' rendezvous listens on host 0, the node this script runs on: a port free here.",
        f"export CNNBENCH_COORDINATOR_PORT=$({q(python)} -c "
        "'import socket; s = socket.socket(); s.bind((\"\", 0)); print(s.getsockname()[1])')",
        "# One task per cnnbench host; SLURM_PROCID/SLURM_NTASKS/SLURM_JOB_NODELIST give each its place.",
        f"srun --ntasks={run.hosts} --ntasks-per-node={res.tasks_per_node}{step_cpus} --kill-on-bad-exit=1 "
        f"{q(python)} -m cnnbench.cluster.job {q(str(files.run_json))} {q(str(files.rows))}",
        ""]
    return "\n".join(lines)


# -- Slurm's commands ---------------------------------------------------------------------------------


def _slurm(args: list[str], what: str) -> subprocess.CompletedProcess:
    if not shutil.which(args[0]):
        raise SlurmError(f"{args[0]} not found: --slurm needs Slurm's client commands on PATH")
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=SLURM_COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{what}: {args[0]} did not answer in {SLURM_COMMAND_TIMEOUT_S:.0f} s") from None


def submit(script: Path) -> str:
    """sbatch the script; returns the job id."""
    done = _slurm(["sbatch", "--parsable", str(script)], "sbatch")
    if done.returncode != 0:
        raise SlurmError(f"sbatch {script} refused: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout.strip().split(";")[0]


@dataclass(frozen=True)
class JobState:
    state: str  # PENDING, RUNNING, COMPLETED, TIMEOUT, CANCELLED, NODE_FAIL, ...
    reason: str = ""
    nodes: str = ""
    exit_code: str = ""
    source: str = "scontrol"  # scontrol | sacct

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES


def _fields(line: str) -> dict[str, str]:
    out = {}
    for token in line.split():
        key, sep, value = token.partition("=")
        if sep:
            out[key] = value
    return out


def parse_scontrol_jobs(text: str) -> dict[str, JobState]:
    """``scontrol show job -o`` (one job a line) -> states by job id."""
    states = {}
    for line in text.splitlines():
        got = _fields(line)
        if "JobId" in got and "JobState" in got:
            states[got["JobId"]] = JobState(got["JobState"], got.get("Reason", ""), got.get("NodeList", ""),
                                            got.get("ExitCode", ""))
    return states


def parse_sacct(text: str) -> dict[str, JobState]:
    """``sacct -X -n -P -o JobID,State,ExitCode,NodeList,Reason`` -> states by job id."""
    states = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) >= 4 and parts[0]:
            # "CANCELLED by 1000": the state is the first word
            states[parts[0]] = JobState(parts[1].split()[0] if parts[1] else "UNKNOWN",
                                        parts[4] if len(parts) > 4 else "", parts[3], parts[2], "sacct")
    return states


def query_states(job_ids: Iterable[str]) -> dict[str, JobState]:
    """States of the jobs Slurm still knows: slurmctld's memory first (no accounting needed), then
    accounting for the ones it has forgotten. A job neither knows is missing from the answer.
    Raises SlurmError when slurmctld cannot be reached, so that no job is settled on a network blip."""
    wanted = list(dict.fromkeys(job_ids))
    if not wanted:
        return {}
    done = _slurm(["scontrol", "show", "job", "-o"], "scontrol show job")
    if done.returncode != 0:
        raise SlurmError(f"scontrol show job: {done.stderr.strip() or 'failed'}")
    known = parse_scontrol_jobs(done.stdout)
    states = {job: known[job] for job in wanted if job in known}
    forgotten = [job for job in wanted if job not in states]
    if forgotten and shutil.which("sacct"):
        found = subprocess.run(["sacct", "-X", "-n", "-P", "-j", ",".join(forgotten), "-o",
                                "JobID,State,ExitCode,NodeList,Reason"], capture_output=True, text=True,
                               timeout=SLURM_COMMAND_TIMEOUT_S)
        if found.returncode == 0:  # "accounting storage is disabled" is rc 1: nothing to learn there
            states.update({job: s for job, s in parse_sacct(found.stdout).items() if job in forgotten})
    return states


# -- the ledger of submitted jobs ---------------------------------------------------------------------


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
