"""`cnnbench run` end to end: real workers, real rows, the timing protocol's arithmetic."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
from conftest import REPO, TINY_DIGITS, run_cli, write_spec

from cnnbench.table import store


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_torch_run_writes_an_ok_row_with_consistent_timing(tmp_path, tiny_spec):
    out = tmp_path / "rows.csv"
    done = run_cli("run", tiny_spec, "--out", out, "--profile", tmp_path / "traces", "--no-report")
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = store.read_rows(out)
    assert row["status"] == "ok" and row["backend"] == "torch" and row["strategy"] == "ddp"
    # --profile: the first timed window was traced (and left out of the 3 windows' statistics)
    trace = tmp_path / "traces" / row["run_id"] / "trace.json"
    assert row["profile_path"] == str(trace.parent) and trace.stat().st_size > 1000
    assert row["windows"] == 2
    assert row["images_per_sec"] == pytest.approx(row["global_batch"] / (row["step_time_ms_median"] / 1000), rel=0.01)
    assert row["step_time_ms_p10"] <= row["step_time_ms_median"] <= row["step_time_ms_p90"]
    # the CSV keeps 6 significant digits: the ratio of two rounded times is good to ~1e-5 of itself
    assert row["step_time_spread"] + 1 == pytest.approx(row["step_time_ms_p90"] / row["step_time_ms_p10"], rel=2e-5)
    assert row["params"] == 53_002 and row["first_step_s"] > 0 and row["train_wall_s"] > 0
    assert row["backend_version"].startswith("2.") and "torch=" in row["stack_versions"]
    assert row["test_accuracy"] > 0.5 and row["epochs"] == 2
    history = store.read_history(out)
    assert list(history["epoch"]) == [1, 2] and set(history["run_id"]) == {row["run_id"]}
    assert "img/s" in done.stdout  # the table of rows written


def test_tensorflow_mirrored_and_fit_rows(tmp_path):
    text = TINY_DIGITS.replace('["torch"]', '["tensorflow"]').replace("devices = [1]", "devices = [2]")
    spec = write_spec(tmp_path, text + '[tensorflow]\nstrategies = ["mirrored", "fit"]\n')
    out = tmp_path / "rows.csv"
    done = run_cli("run", spec, "--out", out, "--profile", tmp_path / "traces", "--no-report")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = store.read_rows(out)
    assert [(r["strategy"], r["status"], r["devices"]) for r in rows] == [("mirrored", "ok", 2), ("fit", "ok", 2)]
    for row in rows:  # TensorFlow's profiler, started from the custom loop and from a fit callback
        traces = [p for p in (tmp_path / "traces" / row["run_id"]).rglob("*.xplane.pb") if p.stat().st_size]
        assert traces, row["strategy"]
    assert all(r["device_type"] == "cpu-emulated" and r["test_accuracy"] > 0.5 for r in rows)


def _two_hosts(spec, out, backend: str) -> list[subprocess.CompletedProcess]:
    port = _free_port()
    coordinator = f"127.0.0.1:{port}"
    if backend == "tensorflow":  # TF_CONFIG needs every worker's address
        coordinator = f"127.0.0.1:{port},127.0.0.1:{_free_port()}"
    procs = [subprocess.Popen([sys.executable, "-m", "cnnbench.cli", "run", str(spec), "--out", str(out),
                               "--backend", backend, "--devices", "2", "--hosts", "2", "--host-rank", str(rank),
                               "--coordinator", coordinator, "--no-report"], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    done = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=600)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr))
    return done


@pytest.mark.parametrize("backend, strategy", [("tensorflow", "mirrored"), ("jax", "sharded")])
def test_two_hosts_on_localhost_write_one_row(tmp_path, backend, strategy):
    spec = write_spec(tmp_path, TINY_DIGITS)
    out = tmp_path / "rows.csv"
    done = _two_hosts(spec, out, backend)
    for proc in done:
        assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = store.read_rows(out)
    got = (row["backend"], row["strategy"], row["hosts"], row["devices"], row["status"])
    assert got == (backend, strategy, 2, 2, "ok")
    assert row["test_accuracy"] > 0.5


def test_missing_framework_gives_a_skipped_row(tmp_path, tiny_spec):
    out = tmp_path / "rows.csv"
    # A metadata path without torch makes cnnbench see it as not installed.
    code = ("import importlib.metadata as m, sys; real = m.version\n"
            "def fake(name):\n    if name == 'torch': raise m.PackageNotFoundError(name)\n    return real(name)\n"
            "m.version = fake\nfrom cnnbench.cli import main\n"
            "sys.argv = ['cnnbench', 'run', sys.argv[1], '--out', sys.argv[2]]\nmain()")
    done = subprocess.run([sys.executable, "-c", code, str(tiny_spec), str(out)], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (row,) = store.read_rows(out)
    assert row["status"] == "skipped" and "not installed" in row["error"] and "pip install" in row["error"]


def test_quickstart_reaches_accuracy_on_every_backend(tmp_path):
    """The embedded default: every backend and strategy, 1 and 2 devices, accuracy >= 0.95
    (keras: its default engine, keras-jax, also on 2 emulated devices). The charts are tested elsewhere."""
    out = tmp_path / "quickstart.csv"
    done = run_cli("run", "--out", out, "--no-report", timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = store.read_rows(out)
    expected = {(b, n) for b in ("torch", "tensorflow", "jax", "keras") for n in (1, 2)}
    assert {(r["backend"], r["devices"]) for r in rows} == expected
    for row in rows:
        assert row["status"] == "ok", row
        assert row["test_accuracy"] >= 0.95, (row["backend"], row["strategy"], row["devices"], row["test_accuracy"])
        assert row["time_to_accuracy_s"] is not None
