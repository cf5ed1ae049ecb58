"""`cnnbench sweep`: the plan is the product of the spec's lists; an interrupted sweep resumes."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
from conftest import REPO, TINY_DIGITS, run_cli, write_spec

from cnnbench.table import store


def test_dry_run_plan_is_the_product(tmp_path):
    text = (TINY_DIGITS.replace('["torch"]', '["torch", "jax"]').replace("devices = [1]", "devices = [1, 2, 4]")
            .replace("per_device_batch = 64", 'per_device_batch = [16, 32]\nprecision = ["fp32", "bf16"]'))
    spec = write_spec(tmp_path, text + '[jax]\nstrategies = ["sharded", "pmap"]\n')
    done = run_cli("sweep", spec, "--dry-run", "--out", tmp_path / "r.csv")
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if "[run]" in line]
    # (torch ddp + jax sharded + jax pmap) x 2 batches x 2 precisions x 3 device counts
    assert len(lines) == 3 * 2 * 2 * 3
    combos = {tuple(line.split()[2:9]) for line in lines}  # backend/strategy ... precision
    assert len(combos) == len(lines)
    assert not (tmp_path / "r.csv").exists()


def _run_folders(tmp: Path) -> list[Path]:
    """The launcher's temporary folders of runs (each holds the run's run.json while it goes)."""
    return sorted(tmp.glob("cnnbench-*"))


def test_interrupted_sweep_resumes_with_the_remaining_runs(tmp_path):
    spec = write_spec(tmp_path, TINY_DIGITS.replace("devices = [1]", "devices = [1, 2]"))
    out = tmp_path / "r.csv"
    tmp = tmp_path / "tmp"  # the commands' own TMPDIR: their run folders are found there and nowhere else
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    proc = subprocess.Popen([sys.executable, "-m", "cnnbench.cli", "sweep", str(spec), "--out", str(out)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not (out.exists() and len(out.read_text().splitlines()) >= 2):
        time.sleep(0.5)
    while time.monotonic() < deadline and not any((f / "run.json").exists() for f in _run_folders(tmp)):
        time.sleep(0.2)
    run_tree = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGKILL)  # killed outright while the second run is going
    proc.wait()
    for orphan in run_tree:  # its run's process group outlives it; a user would kill that too
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(orphan.pid, signal.SIGKILL)
    left = _run_folders(tmp)
    assert len(left) == 1 and (left[0] / "run.json").exists()  # a dead launcher cannot clean up itself
    first = store.read_rows(out)
    assert len(first) == 1 and first[0]["devices"] == 1
    dry = run_cli("sweep", spec, "--out", out, "--dry-run", env={"TMPDIR": str(tmp)})
    assert "1 to run, 1 already" in dry.stdout
    again = run_cli("sweep", spec, "--out", out, "--no-report", env={"TMPDIR": str(tmp)})
    assert again.returncode == 0, again.stderr[-2000:]
    assert _run_folders(tmp) == []  # the next run removed the dead launcher's folder, and its own
    rows = store.read_rows(out)
    assert [(r["devices"], r["status"]) for r in rows] == [(1, "ok"), (2, "ok")]
    forced = run_cli("sweep", spec, "--out", out, "--dry-run", "--force")
    assert "2 to run" in forced.stdout
