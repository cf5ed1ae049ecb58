"""The health metrics against known answers on a GPU (benchmarks/health_known.py, one process per
framework): busy >= 95% and NVML utilisation >= 90% for back-to-back matrix products, NVML's energy
counter within 5% of power x time, busy under a known host sleep, exact H2D bytes of pageable copies,
and the sync share of a step that waits for the device; then a profiled training run's energy columns."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cnnbench.table import store
from tests.conftest import run_cli, write_spec

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.gpu
@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_known_cases_pass(framework):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "health_known.py"), framework],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"probe"')]
    checks = [line for line in lines if line["case"] != "all"]
    cases = {"matmul", "sleep", "h2d", "sync"} | ({"h2d_pinned"} if framework == "torch" else set())
    assert {c["case"] for c in checks} == cases, done.stderr[-2000:]
    failed = [c for c in checks if not c["ok"]]
    assert not failed and done.returncode == 0, failed


@pytest.mark.gpu
def test_gpu_training_row_has_energy_over_its_windows(tmp_path):
    spec = write_spec(tmp_path, """
name = "energy"
model = "resnet18_cifar"
dataset = "synthetic"
image_size = 64
backends = ["torch"]
device = "gpu"
per_device_batch = 256
[timing]
warmup_steps = 5
windows = 2
window_steps = 400
""")
    out = tmp_path / "rows.csv"
    done = run_cli("run", spec, "--out", out, "--no-report")
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = store.read_rows(out)
    window_s = row["step_time_ms_median"] * 400 * 2 / 1000
    assert window_s >= 2.0  # else the columns stay empty by design
    assert 50 < row["mean_power_w"] < 1200
    # energy per image x images per second = watts
    assert row["energy_j_per_image"] * row["images_per_sec"] == pytest.approx(row["mean_power_w"], rel=0.1)
