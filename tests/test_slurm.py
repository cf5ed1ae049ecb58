"""`cnnbench sweep --slurm` against a real one-node Slurm cluster (munged, slurmctld, slurmd started
here on loopback by a fixture), and the pure pieces (SLURM_* -> placement, scripts, states) alone."""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import REPO, TINY_DIGITS, run_cli, write_spec
from slurm_cluster import LocalSlurm, slurm_installed

from cnnbench.cluster.allocation import AllocationError, placement, tasks_per_node
from cnnbench.cluster.ledger import ROW_GRACE_S, Ledger, TrackedJob, collect, row_may_still_show
from cnnbench.cluster.sbatch import JobFiles, place_runs, render_script, resources
from cnnbench.cluster.slurm_jobs import JobState, parse_sacct, parse_scontrol_jobs
from cnnbench.errors import SpecError
from cnnbench.expand import expand
from cnnbench.spec import parse_spec_text
from cnnbench.table import store

FAST = TINY_DIGITS.replace("epochs = 2", "epochs = 1") + "[slurm]\npoll_s = 0.5\n"


# -- the pure pieces ------------------------------------------------------------------------------------


def test_slurm_variables_map_to_hosts_rank_and_coordinator():
    env = {"SLURM_NTASKS": "3", "SLURM_PROCID": "2", "SLURM_TASKS_PER_NODE": "2,1",
           "CNNBENCH_COORDINATOR_PORT": "29500"}
    got = placement(env, hostnames=["gpu01", "gpu02"])
    assert (got.hosts, got.host_rank) == (3, 2)
    assert got.coordinator == "gpu01:29500,gpu01:29501,gpu02:29502"  # host 0 first, block distribution
    assert tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    with pytest.raises(AllocationError, match="SLURM_PROCID is not set"):
        placement({"SLURM_NTASKS": "2"}, hostnames=["a"])
    with pytest.raises(AllocationError, match="places 1"):
        placement({**env, "SLURM_TASKS_PER_NODE": "1"}, hostnames=["gpu01"])


def _gpu_runs(tmp_path: Path, slurm_table: str):
    text = (FAST.replace('device = "cpu"', 'device = "gpu"').replace("devices = [1]", "devices = [4, 16]")
            .replace("per_device_batch = 64", "per_device_batch = 4"))
    spec = parse_spec_text(text.replace("[slurm]\n", "[slurm]\n" + slurm_table), str(tmp_path / "s.toml"))
    return spec, place_runs(expand(spec, check_devices=False), spec.slurm, spec.source)


def test_script_asks_for_the_runs_resources(tmp_path):
    spec, (small, large) = _gpu_runs(tmp_path, 'devices_per_node = 8\ncpus_per_task = 32\npartition = "gpu"\n'
                                               'account = "proj"\nqos = "high"\nconstraint = "h200"\n'
                                               'extra = ["--mem=0", "#SBATCH --exclusive"]\n'
                                               'setup = ["module load cuda"]\n')
    assert (small.hosts, large.hosts) == (1, 2)
    assert resources(large, spec.slurm).describe() == "2 node(s) x 1 task(s), 8 GPU(s)/node, 35 min"
    script = render_script(large, spec.slurm, JobFiles(tmp_path, large.run_id), python="/opt/py/bin/python",
                           repo=REPO, workdir=tmp_path)
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=8",
                 "#SBATCH --cpus-per-task=32", "#SBATCH --time=35", "#SBATCH --partition=gpu",
                 "#SBATCH --account=proj", "#SBATCH --qos=high", "#SBATCH --constraint=h200",
                 "#SBATCH --mem=0", "#SBATCH --exclusive", "module load cuda", f"#SBATCH --chdir={tmp_path}"):
        assert line in script.splitlines(), line
    assert ("srun --ntasks=2 --ntasks-per-node=1 --cpus-per-task=32 --kill-on-bad-exit=1 /opt/py/bin/python "
            "-m cnnbench.cluster.job" in script)
    # every #SBATCH line comes before the first command, or sbatch ignores it
    lines = script.splitlines()
    assert max(i for i, t in enumerate(lines) if t.startswith("#SBATCH")) < lines.index("set -euo pipefail")


@pytest.mark.parametrize("table, field, message", [
    ('extra = ["rm -rf /"]', "slurm.extra[0]", "expected an sbatch option"),
    ("devices_per_node = -1", "slurm.devices_per_node", ">= 0"),
    ('partition = 3', "slurm.partition", "expected a string"),
    ("nodes = 2", "slurm.nodes", "unknown field"),
])
def test_bad_slurm_fields_are_named(tmp_path, table, field, message):
    with pytest.raises(SpecError, match=re.escape(field) + ": .*" + re.escape(message)):
        parse_spec_text(FAST.replace("[slurm]\n", f"[slurm]\n{table}\n"), "s.toml")


def test_bad_command_line_options_exit_2_with_one_line(tmp_path):
    spec = write_spec(tmp_path, FAST)
    bad = run_cli("sweep", spec, "--slurm", "--dry-run", "--sbatch", "echo hi", "--out", tmp_path / "r.csv")
    assert bad.returncode == 2 and "--sbatch: option[0]: expected an sbatch option" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    plan = run_cli("sweep", spec, "--slurm", "--dry-run", "--partition", "p1", "--out", tmp_path / "r.csv")
    assert plan.returncode == 0 and "1 to submit" in plan.stdout and "1 node(s) x 1 task(s), 35 min" in plan.stdout
    assert not (tmp_path / "r.slurm").exists()  # a dry run writes nothing


def test_devices_that_do_not_fill_nodes_are_refused(tmp_path):
    with pytest.raises(SpecError, match="slurm.devices_per_node: a run of 4 devices cannot be split into nodes of 3"):
        _gpu_runs(tmp_path, "devices_per_node = 3\n")


def test_job_states_from_scontrol_and_sacct():
    text = ("JobId=7 JobName=x JobState=TIMEOUT Reason=TimeLimit ExitCode=0:0 NodeList=gpu01\n"
            "JobId=8 JobName=y JobState=PENDING Reason=BeginTime ExitCode=0:0 NodeList=(null)\n")
    states = parse_scontrol_jobs(text)
    assert (states["7"].state, states["7"].active, states["8"].active) == ("TIMEOUT", False, True)
    accounted = parse_sacct("9|CANCELLED by 1000|0:15|gpu[01-02]|None\n10|NODE_FAIL|1:0|gpu03|\n")
    assert accounted["9"].state == "CANCELLED" and accounted["10"].state == "NODE_FAIL"


def test_a_job_that_ended_by_itself_waits_for_its_row_before_a_failed_row(tmp_path):
    """NFS may show the job's row file late on the submitting host: COMPLETED or FAILED without a row
    is given ROW_GRACE_S (remembered in the ledger across reruns); TIMEOUT and the like are not."""
    spec = parse_spec_text(FAST, str(tmp_path / "s.toml"))
    (run,) = place_runs(expand(spec), spec.slurm, spec.source)
    ledger = Ledger(tmp_path / "r.slurm")
    job = TrackedJob("5", run, JobFiles(ledger.folder, run.run_id))
    ledger.folder.mkdir()
    job.files.run_json.write_text(run.to_json())
    ledger.record_submitted(job)
    assert row_may_still_show(ledger, job, JobState("COMPLETED"), now=1000.0)
    (again,) = ledger.jobs()  # a rerun reads when it was first seen ended
    assert again.ended_seen == 1000.0
    assert row_may_still_show(ledger, again, JobState("FAILED"), now=1000.0 + ROW_GRACE_S - 1)
    assert not row_may_still_show(ledger, again, JobState("COMPLETED"), now=1000.0 + ROW_GRACE_S + 1)
    assert not row_may_still_show(ledger, job, JobState("TIMEOUT"), now=1000.0)


def test_a_merge_between_a_jobs_two_files_loses_no_history(tmp_path, monkeypatch):
    # A job writes its row file and its history file; `sweep --wait` merges whatever row files it sees,
    # once per row. So the history must exist whenever the row does: written the other way round, a
    # merge between the two writes appended the row without its history, for good (seen on CI,
    # 2026-12-06). Here the job's writer is held after its first file while a merge runs.
    import threading

    from cnnbench.cluster.ledger import merge_job_rows

    folder, out = tmp_path / "r.slurm", tmp_path / "r.csv"
    first_written, go_on = threading.Event(), threading.Event()
    write = store.write_new_table

    def write_then_hold(*args, **kwargs):
        write(*args, **kwargs)
        if not first_written.is_set():
            first_written.set()
            go_on.wait(30)

    monkeypatch.setattr(store, "write_new_table", write_then_hold)
    row = {"schema_version": 1, "run_id": "run0", "slurm_job_id": "7", "backend": "torch", "status": "ok"}
    history = [{"epoch": 1, "wall_s": 1.0, "train_loss": 2.0, "test_loss": 2.0, "test_accuracy": 0.5}]
    job = threading.Thread(target=store.write_rows_file, args=(folder / "7.rows.csv", [row], history))
    folder.mkdir()
    job.start()
    assert first_written.wait(30)
    merge_job_rows(folder, out)  # between the job's two files
    go_on.set()
    job.join(30)
    merge_job_rows(folder, out)
    assert [r["run_id"] for r in store.read_rows(out)] == ["run0"]
    assert list(store.read_history(out)["run_id"]) == ["run0"]


# -- against a real cluster ----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def slurm():
    """munged + slurmctld + slurmd for this session; the jobs left are cancelled, the daemons stopped
    by their pids, also when a test fails (atexit covers a session that dies without teardown)."""
    if not slurm_installed():
        pytest.fail("Slurm is not installed: `apt-get install slurm-wlm munge` (the Makefile's test-deps does it)")
    # A short path of its own: munged's socket path must stay within the 108 bytes of AF_UNIX.
    root = Path(tempfile.mkdtemp(prefix="cnnbench-slurm-"))
    cluster = LocalSlurm(root)
    atexit.register(cluster.stop)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.cancel_all()
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def _sweep(slurm, spec: Path, out: Path, *args: str, timeout: float = 300, cwd: Path = REPO
           ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cnnbench.cli", "sweep", str(spec), "--slurm", "--out", str(out),
                           *args], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env={**os.environ, **slurm.env, "PYTHONPATH": str(REPO)})


def _popen_sweep(slurm, spec: Path, out: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cnnbench.cli", "sweep", str(spec), "--slurm", "--wait",
                             "--out", str(out), "--no-report", *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **slurm.env})


def _submitted_jobs(out: Path, count: int, timeout_s: float = 60) -> list[str]:
    ledger = out.with_name(out.stem + ".slurm") / "jobs.jsonl"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ledger.exists():
            ids = [e["job_id"] for e in map(json.loads, ledger.read_text().splitlines()) if "run_id" in e]
            if len(ids) >= count:
                return ids
        time.sleep(0.3)
    raise AssertionError(f"no {count} job(s) in {ledger} after {timeout_s} s")


@pytest.fixture(scope="session")
def timeout_sweep(slurm, tmp_path_factory):
    """A job past its 1-minute limit: slurmctld checks limits every 30 s, so it ends 60-90 s after it
    starts. Started first and collected by the last test, so the wait overlaps the other tests. The
    job sleeps in its [slurm] setup (no CPU taken from the other tests' runs)."""
    folder = tmp_path_factory.mktemp("timeout")
    spec = write_spec(folder, FAST + 'time_limit_min = 1\nsetup = ["sleep 300"]\n')
    out = folder / "r.csv"
    return _popen_sweep(slurm, spec, out), out, spec


def test_a_rerun_follows_a_queued_or_running_job_instead_of_submitting_it_again(slurm, timeout_sweep):
    _, out, spec = timeout_sweep  # seconds after its submission, far from its time limit
    (job,) = _submitted_jobs(out, 1)
    again = _sweep(slurm, spec, out)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"slurm job {job} is still on" in again.stderr and again.stdout.split() == [job]
    assert _submitted_jobs(out, 1) == [job]


def test_two_run_sweep_rows_land_and_a_rerun_submits_nothing(slurm, tmp_path):
    spec = write_spec(tmp_path, FAST.replace('["torch"]', '["torch", "jax"]'))
    out = tmp_path / "r.csv"
    done = _sweep(slurm, spec, out, "--wait")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = store.read_rows(out)
    assert sorted((r["backend"], r["status"]) for r in rows) == [("jax", "ok"), ("torch", "ok")]
    assert all(r["slurm_job_id"] and r["test_accuracy"] > 0.3 for r in rows)
    jobs = out.with_name("r.slurm")
    for row in rows:  # the scripts stay, readable and resubmittable
        assert f"#SBATCH --job-name=cnnbench-{row['backend']}" in (jobs / f"{row['run_id']}.sbatch").read_text()
    assert len(store.read_history(out)) == 2  # one epoch each, merged from the jobs' own files
    assert (tmp_path / "r" / "summary.md").exists()  # --wait drew the charts
    ledger = (jobs / "jobs.jsonl").read_text()
    again = _sweep(slurm, spec, out)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "nothing to submit" in again.stderr and "skipping 2 run(s) already ok" in again.stderr
    assert (jobs / "jobs.jsonl").read_text() == ledger and len(store.read_rows(out)) == 2


def test_two_tasks_stand_in_for_two_hosts(slurm, tmp_path):
    text = (FAST.replace('["torch"]', '["jax"]').replace("devices = [1]", "devices = [2]")
            .replace("per_device_batch = 64", "per_device_batch = 32"))
    write_spec(tmp_path, text + "devices_per_node = 1\nhosts_per_node = 2\n")
    # relative paths, from another folder: the script names its files absolutely and runs where sweep ran
    done = _sweep(slurm, Path("spec.toml"), Path("r.csv"), "--wait", "--no-report", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = tmp_path / "r.csv"
    (row,) = store.read_rows(out)
    assert (row["status"], row["hosts"], row["devices"]) == ("ok", 2, 2), row["error"]
    (log,) = out.with_name("r.slurm").glob("*.out")
    assert "cnnbench host 1/2" in log.read_text()  # srun's second task joined as host 1


def test_scancel_of_a_queued_job_gives_a_cancelled_row(slurm, tmp_path):
    spec = write_spec(tmp_path, FAST + 'extra = ["--begin=now+3600"]\n')  # queued for an hour
    out = tmp_path / "r.csv"
    proc = _popen_sweep(slurm, spec, out)
    try:
        (job,) = _submitted_jobs(out, 1)
        state = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True,
                               env={**os.environ, **slurm.env}, timeout=30).stdout.strip()
        assert state == "PENDING"
        subprocess.run(["scancel", job], check=True, env={**os.environ, **slurm.env}, timeout=30)
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 1, stderr[-2000:]
    (row,) = store.read_rows(out)
    assert row["status"] == "failed" and f"slurm job {job} ended CANCELLED" in row["error"]


def test_a_job_slurm_no_longer_knows_gives_a_row_saying_so(slurm, tmp_path, monkeypatch):
    """As after MinJobAge on a cluster without accounting storage: scontrol has forgotten the job and
    sacct answers "accounting storage is disabled"."""
    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    spec = parse_spec_text(FAST, str(tmp_path / "s.toml"))
    (run,) = place_runs(expand(spec), spec.slurm, spec.source)
    ledger = Ledger(tmp_path / "r.slurm")
    files = JobFiles(ledger.folder, run.run_id)
    ledger.folder.mkdir()
    files.run_json.write_text(run.to_json())
    ledger.record_submitted(TrackedJob("987654", run, files))
    rows, active, _ = collect(ledger, tmp_path / "r.csv")
    assert not active and [r["status"] for r in rows] == ["failed"]
    assert "slurm job 987654 ended; its state is unknown" in rows[0]["error"]
    assert store.read_rows(tmp_path / "r.csv")[0]["slurm_job_id"] == "987654"
    assert collect(ledger, tmp_path / "r.csv")[0] == []  # settled: not written twice


def test_job_past_its_time_limit_gives_a_timeout_row(timeout_sweep):
    proc, out, _ = timeout_sweep
    try:
        _, stderr = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == 1, stderr[-2000:]
    (row,) = store.read_rows(out)
    assert row["status"] == "failed" and "ended TIMEOUT, reason TimeLimit" in row["error"]
