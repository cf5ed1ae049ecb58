"""`cnnbench health`: the share arithmetic on a hand-written trace, and real profiled runs whose
steps sleep on the host for a known time, so the busy share has a known ceiling."""

from __future__ import annotations

import gzip
import json

import pytest

from cnnbench import faults, gpu_monitor
from cnnbench.report import health, traces
from cnnbench.table import store
from tests.conftest import run_cli, write_spec

# -- the arithmetic, on a trace with exact intervals -----------------------------------------------


def test_union_merges_overlaps_and_clips_to_the_window():
    assert traces.union_us([(0, 100), (50, 150), (300, 400)]) == 250
    assert traces.union_us([(0, 10), (2, 5), (10, 20)]) == 20  # nested and touching
    assert traces.union_us([(-50, 100), (900, 1200)], window=(0, 1000)) == 200
    assert traces.union_us([]) == 0


def _torch_like_trace() -> list[dict]:
    """A 1 ms window: kernels busy 250 µs, copies 100 µs (4,000 bytes H2D), a 200 µs stream sync inside
    the steps, the protocol's end-of-window device sync, and two layer scopes."""
    host, gpu = (1, 1), (0, 7)

    def x(name, ts, dur, where, cat, **args):
        return {"ph": "X", "name": name, "ts": ts, "dur": dur, "pid": where[0], "tid": where[1], "cat": cat,
                "args": args}

    return [
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "ts": 0, "dur": 1000, "pid": "Spans",
         "tid": "PyTorch Profiler"},
        x("layer:conv1", 0, 60, host, "user_annotation"),
        x("cudaLaunchKernel", 10, 5, host, "cuda_runtime", correlation=1),
        x("layer:fc", 200, 50, host, "user_annotation"),
        x("cudaLaunchKernel", 210, 5, host, "cuda_runtime", correlation=2),
        x("cudaLaunchKernel", 700, 5, host, "cuda_runtime", correlation=3),
        x("implicit_gemm", 0, 100, gpu, "kernel", correlation=1),
        x("implicit_gemm", 50, 100, gpu, "kernel", correlation=2),
        x("elementwise", 300, 100, gpu, "kernel", correlation=3),
        x("Memcpy HtoD (Pinned -> Device)", 500, 50, gpu, "gpu_memcpy", bytes=1000),
        x("Memcpy HtoD (Pageable -> Device)", 600, 50, gpu, "gpu_memcpy", bytes=3000),
        x("Memcpy DtoH (Device -> Pageable)", 620, 10, gpu, "gpu_memcpy", bytes=99),
        x("cudaStreamSynchronize", 100, 200, host, "cuda_runtime"),
        x("cudaDeviceSynchronize", 720, 280, host, "cuda_runtime"),  # the protocol's own: not counted
        x("aten::copy_", 400, 30, host, "cpu_op"),
    ]


def test_shares_of_a_hand_written_trace():
    facts = health.measure_trace(traces.parse_events(_torch_like_trace()))
    assert facts.on_device and facts.window_ms == pytest.approx(1.0)
    assert facts.busy_share == pytest.approx(0.25)
    assert facts.memcpy_share == pytest.approx(0.10)  # 500-550 and 600-650; the D2H lies inside the second
    assert facts.aten_copy_share == pytest.approx(0.03)
    assert facts.sync_share == pytest.approx(0.20)
    assert facts.h2d_bytes == 4000
    assert dict(facts.top_kernels) == pytest.approx({"implicit_gemm": 200.0, "elementwise": 100.0})
    # each kernel is charged to the layer scope around its launch; the third had none
    assert dict(facts.top_layers) == pytest.approx({"conv1": 100.0, "fc": 100.0})
    row = {"per_device_batch": 2, "window_steps": 2, "model": "smallcnn", "image_size": 16,
           "first_step_s": 12.0, "data_wait_share": 0.5}
    assert health.health_columns(facts, row) == pytest.approx(
        {"device_busy_share": 0.25, "copy_share": 0.10, "h2d_bytes_per_image": 1000.0, "sync_share": 0.20})
    verdicts = {c.metric.split(" (")[0]: c.verdict for c in health.checks(facts, row)}
    assert verdicts["GPU busy"] == "danger" and verdicts["memcpy share"] == "watch"
    assert verdicts["sync/wait share"] == "danger" and verdicts["first step"] == "watch"
    assert verdicts["data wait"] == "danger"  # read from the data branch's column where a row has it
    assert verdicts["host-to-device bytes per image"] == "watch"  # 1000 B: above uint8 256 B, under fp32 1 KiB
    assert verdicts["loader workers' GPU memory"] == "n/a"


def test_jax_gpu_trace_kernels_copies_and_flax_scopes(tmp_path):
    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/device:GPU:0"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 5, "args": {"name": "Stream #13(Compute)"}},
        {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "/host:CPU"}},
        {"ph": "X", "name": "step", "pid": 2, "tid": 9, "ts": 0, "dur": 400},
        {"ph": "X", "name": "convolution.3", "pid": 1, "tid": 5, "ts": 0, "dur": 100,
         "args": {"hlo_op": "convolution.3", "tf_op": "jit(step)/jit(main)/jvp(ResNet)/layer1_0/Conv_0/conv"}},
        {"ph": "X", "name": "fusion.9", "pid": 1, "tid": 5, "ts": 100, "dur": 100,
         "args": {"hlo_op": "fusion.9", "tf_op": "jit(step)/transpose(jvp(ResNet))/layer1_0/BatchNorm_0/mul"}},
        {"ph": "X", "name": "MemcpyH2D", "pid": 1, "tid": 5, "ts": 300, "dur": 40,
         "args": {"memcpy_details": "kind_src:pinned kind_dst:device size:2048"}},
    ]
    path = tmp_path / "plugins" / "profile" / "2026_01_01" / "host.trace.json.gz"
    path.parent.mkdir(parents=True)
    with gzip.open(path, "wt") as handle:
        json.dump({"traceEvents": events}, handle)
    facts = health.measure_trace(traces.load_trace(tmp_path))
    assert facts.kind == "jax" and facts.on_device
    assert facts.busy_share == pytest.approx(0.5) and facts.memcpy_share == pytest.approx(0.1)
    assert facts.h2d_bytes == 2048
    assert dict(facts.top_layers) == {"ResNet/layer1_0/Conv_0": 100.0, "ResNet/layer1_0/BatchNorm_0": 100.0}


def test_health_refuses_what_it_cannot_read(tmp_path):
    done = run_cli("health", tmp_path / "missing.csv")
    assert done.returncode == 2 and "no such results file" in done.stderr and len(done.stderr.splitlines()) == 1
    (tmp_path / "tf").mkdir()
    (tmp_path / "tf" / "x.xplane.pb").write_bytes(b"\0")
    done = run_cli("health", tmp_path / "tf")
    assert done.returncode == 2 and "xplane.pb" in done.stderr


def test_sleep_fault_and_monitor_without_nvml(monkeypatch):
    assert faults.parse("kind=sleep,ms=25") == {"kind": "sleep", "ms": "25", "step": "0"}
    with pytest.raises(ValueError, match="ms=N"):
        faults.parse("kind=sleep")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert gpu_monitor.nvml_index(1) == 5
    assert gpu_monitor.start(0) is None  # no NVIDIA driver here: no monitor, no failure


def test_pinning_failure_names_host_limits_not_gpu_memory():
    import torch

    from backends.torch.common import PinnedMemoryError, pinned

    with pytest.raises(PinnedMemoryError, match="RLIMIT_MEMLOCK .*cgroup memory.max.*not GPU memory|"
                                                "not GPU memory.*RLIMIT_MEMLOCK"):
        pinned(torch.zeros(256))  # no CUDA here, so pinning fails for real


# -- real profiled runs with a known host stall -----------------------------------------------------

SLEEP_MS, WINDOW_STEPS = 150, 3
SPEC = f"""
name = "health"
model = "smallcnn"
dataset = "synthetic"
image_size = 16
channels = 1
num_classes = 10
backends = ["BACKEND"]
device = "cpu"
per_device_batch = 16
compile_cache_dir = "CACHE"
[timing]
warmup_steps = 1
windows = 2
window_steps = {WINDOW_STEPS}
"""


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_profiled_run_with_a_host_sleep_has_the_idle_time_in_its_health(tmp_path, backend):
    cache = tmp_path / "cache"
    spec = write_spec(tmp_path, SPEC.replace("BACKEND", backend).replace("CACHE", str(cache)))
    out = tmp_path / "rows.csv"
    done = run_cli("run", spec, "--out", out, "--profile", tmp_path / "traces", "--no-report",
                   env={"CNNBENCH_FAULT": f"kind=sleep,ms={SLEEP_MS}"})
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = store.read_rows(out)
    trace = traces.load_trace(tmp_path / "traces" / row["run_id"])
    window = trace.window()
    window_s = (window[1] - window[0]) / 1e6
    work = [(e.start, e.end) for e in trace.host_ops()]
    gaps = _gaps(work, window)
    if backend == "torch":
        # Ops run synchronously: the sleeps lie in no op, so the busy share can be at most what the
        # sleeps leave of the window.
        ceiling = 1 - WINDOW_STEPS * SLEEP_MS / 1000 / window_s
        assert 0.0 < row["device_busy_share"] <= ceiling + 0.02
        assert sum(g >= 0.95 * SLEEP_MS * 1000 for g in gaps) >= WINDOW_STEPS - 1  # one stall per step
    else:
        # JAX dispatches asynchronously: a step's ops run during the next step's stall, which leaves
        # an idle gap of the stall less that step's compute.
        assert 0.0 < row["device_busy_share"] < 1
        assert sum(g >= 0.5 * SLEEP_MS * 1000 for g in gaps) >= WINDOW_STEPS - 1
    report = (tmp_path / "traces" / row["run_id"] / health.HEALTH_FILE).read_text()
    assert "CPU compute threads busy" in report and f"{100 * row['device_busy_share']:.1f}%" in report
    shown = run_cli("health", out, row["run_id"])
    assert shown.returncode == 0 and "Top ops by self time" in shown.stdout
    if backend == "torch":
        assert row["copy_share"] is not None
        assert "| conv1 |" in report  # the layer scopes of the eager model
    else:  # JAX kept every compilation in the persistent cache the spec named
        assert any((cache / "jax").iterdir())


def _gaps(intervals, window) -> list[float]:
    """Idle stretches between the merged busy intervals, µs."""
    gaps, end = [], window[0]
    for start, stop in sorted(intervals):
        if start > end:
            gaps.append(start - end)
        end = max(end, stop)
    return gaps + [window[1] - end]


def test_pitfall_switches_reach_the_launch_environment(tmp_path):
    import dataclasses

    from cnnbench.backend import load as load_backend
    from cnnbench.expand import expand
    from cnnbench.spec import parse_spec_text

    text = SPEC.replace('"BACKEND"', '"torch", "jax"').replace("CACHE", str(tmp_path / "c"))
    spec = parse_spec_text(text + "[torch]\ndeterministic = true\ncudnn_benchmark = false\n")
    torch_run, jax_run = expand(spec)
    torch_env = load_backend("torch").launch_layout(torch_run).env
    assert torch_env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "c" / "torch")
    assert torch_env["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert torch_run.options.cudnn_benchmark is False
    jax_env = load_backend("jax").launch_layout(jax_run).env
    assert jax_env["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path / "c" / "jax")
    assert jax_env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0"
    own_cache = dataclasses.replace(jax_run.options, compile_cache_dir=str(tmp_path / "j"))
    own = dataclasses.replace(jax_run, options=own_cache)
    assert load_backend("jax").launch_layout(own).env["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path / "j" / "jax")


@pytest.mark.gpu
def test_profiled_gpu_run_has_kernel_shares_and_nvml_samples(tmp_path):
    text = SPEC.replace('"BACKEND"', '"torch"').replace('device = "cpu"', 'device = "gpu"').replace(
        "CACHE", str(tmp_path / "cache"))
    out = tmp_path / "rows.csv"
    done = run_cli("run", write_spec(tmp_path, text), "--out", out, "--profile", tmp_path / "traces",
                   "--no-report", env={"CNNBENCH_FAULT": f"kind=sleep,ms={SLEEP_MS}"})
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = store.read_rows(out)
    facts = health.measure_trace(traces.load_trace(tmp_path / "traces" / row["run_id"]))
    assert facts.on_device and facts.top_kernels
    window_s = facts.window_ms / 1000
    assert 0 < row["device_busy_share"] <= 1 - WINDOW_STEPS * SLEEP_MS / 1000 / window_s + 0.02
    assert row["nvml_gpu_util_pct"] is not None and row["nvml_memory_used_mb"] > 0
