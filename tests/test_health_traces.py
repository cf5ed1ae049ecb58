"""The health table's arithmetic on hand-written traces of both formats (several streams, overlapping
kernels, the window scope), the NVML window rules, energy columns and report, and `cnnbench health`'s
answers to bad input."""

from __future__ import annotations

import gzip
import json

import pandas as pd
import pytest

from cnnbench import gpu_monitor
from cnnbench.report import energy, health, traces
from cnnbench.table import schema, store
from tests.conftest import run_cli

WINDOW = traces.WINDOW_SCOPE


def _x(name, ts, dur, pid, tid, cat="", **args) -> dict:
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "pid": pid, "tid": tid, "cat": cat, "args": args}


def _meta(kind, pid, name, tid=None) -> dict:
    item = {"ph": "M", "name": kind, "pid": pid, "args": {"name": name}}
    return item if tid is None else {**item, "tid": tid}


def torch_two_streams() -> list[dict]:
    """Session 0-2000 µs, the window scope 500-1500; kernels on streams 7 and 20 overlapping, a copy,
    a memset (not a kernel), a stream sync inside the steps and the end-of-window device sync."""
    host, s7, s20 = (1, 1), (0, 7), (0, 20)
    return [
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "ts": 0, "dur": 2000, "pid": "Spans", "tid": 0},
        _x(WINDOW, 500, 1000, *host, "user_annotation"),
        _x(WINDOW, 510, 980, *s7, "gpu_user_annotation"),  # its device-side twin: not the window
        _x("gemm", 400, 200, *s7, "kernel"),  # starts before the window: clipped to 500-600
        _x("gemm", 600, 200, *s7, "kernel"),
        _x("reduce", 700, 200, *s20, "kernel"),  # overlaps the one above on another stream: 600-900
        _x("Memset (Device)", 950, 50, *s7, "gpu_memset"),
        _x("Memcpy HtoD (Pageable -> Device)", 1000, 100, *s20, "gpu_memcpy", bytes=6000),
        _x("late", 1400, 50, *s7, "kernel"),
        _x("cudaStreamSynchronize", 1100, 250, *host, "cuda_runtime"),
        _x("cudaDeviceSynchronize", 1420, 80, *host, "cuda_runtime"),  # ends after the last kernel: the drain
        _x("gemm", 1600, 300, *s7, "kernel"),  # after the window (the profiler's stop): not counted
    ]


def test_torch_trace_window_scope_streams_and_overlaps():
    trace = traces.parse_events(torch_two_streams())
    assert trace.window() == (500, 1500)  # the scope, not the session (0-2000)
    facts = health.measure_trace(trace)
    assert facts.window_ms == pytest.approx(1.0)
    # kernels 500-900 (two streams, overlap counted once) + 1400-1450; the memset is no kernel
    assert facts.busy_share == pytest.approx(0.45)
    assert facts.memcpy_share == pytest.approx(0.10)
    assert facts.sync_share == pytest.approx(0.25)  # the stream sync; the device sync is the window's drain
    assert facts.h2d_bytes == 6000


def test_window_falls_back_to_the_session_then_the_events():
    events = [e for e in torch_two_streams() if e["name"] != WINDOW]
    assert traces.parse_events(events).window() == (0, 2000)
    no_session = [e for e in events if e["cat"] != "Trace"]
    assert traces.parse_events(no_session).window() == (400, 1900)


def jax_gpu_trace() -> list[dict]:
    """JAX 0.11 on a GPU: two compute streams with overlapping kernels, a copy stream, memsets, the
    Python tracer's block_until_ready inside the window and at its end."""
    return [
        _meta("process_name", 1, "/device:GPU:0"),
        _meta("thread_name", 1, "Stream #14(MemcpyD2D,Compute,Memset)", 14),
        _meta("thread_name", 1, "Stream #16(Compute)", 16),
        _meta("thread_name", 1, "Stream #15(MemcpyH2D)", 15),
        _meta("process_name", 2, "/host:CPU"),
        _meta("thread_name", 2, "python3", 3),
        _x("$profilers.py:70 jax_trace", -300, 2600, 2, 3),
        _x(WINDOW, 0, 2000, 2, 3),
        _x("convolution.3", 0, 600, 1, 14, hlo_op="convolution.3", tf_op="jit(step)/jvp(ResNet)/Conv_0/conv"),
        _x("fusion.9", 400, 400, 1, 16, hlo_op="fusion.9", tf_op="jit(step)/transpose(jvp(ResNet))/BatchNorm_0/mul"),
        _x("Memset 3", 900, 100, 1, 14, Memset_details="kind:device num_bytes:4 async:1"),
        _x("MemcpyH2D", 1000, 200, 1, 15, memcpy_details="kind_src:pinned kind_dst:device size:4096"),
        _x("fusion.10", 1200, 300, 1, 14, hlo_op="fusion.10", tf_op="jit(step)/Dense_0/dot"),
        _x("$api.py:2757 block_until_ready", 800, 300, 2, 3),  # a wait inside a step
        _x("$api.py:2768 try_to_block", 810, 280, 2, 3),  # nested in it: counted once
        _x("$api.py:2757 block_until_ready", 1450, 540, 2, 3),  # the protocol's own, at the end
    ]


def test_jax_trace_streams_copies_memsets_and_python_waits(tmp_path):
    path = tmp_path / "plugins" / "profile" / "2026_12_04" / "vm.trace.json.gz"
    path.parent.mkdir(parents=True)
    with gzip.open(path, "wt") as handle:
        json.dump({"traceEvents": jax_gpu_trace()}, handle)
    trace = traces.load_trace(tmp_path)
    assert trace.kind == "jax" and trace.window() == (0, 2000)  # the scope, not the Python tracer's span
    facts = health.measure_trace(trace)
    assert facts.busy_share == pytest.approx((800 + 300) / 2000)  # 0-800 over two streams, 1200-1500
    assert facts.memcpy_share == pytest.approx(0.10) and facts.h2d_bytes == 4096
    assert facts.sync_share == pytest.approx(300 / 2000)
    assert dict(facts.top_layers) == {"ResNet/Conv_0": 600.0, "ResNet/BatchNorm_0": 400.0, "Dense_0": 300.0}


def test_a_trace_of_copies_alone_is_a_gpu_trace():
    host, stream = (1, 1), (0, 7)
    events = [_x(WINDOW, 0, 1000, *host, "user_annotation"), _x("aten::copy_", 0, 900, *host, "cpu_op"),
              _x("Memcpy HtoD (Pageable -> Device)", 50, 800, *stream, "gpu_memcpy", bytes=602112)]
    facts = health.measure_trace(traces.parse_events(events))
    assert facts.on_device and facts.busy_share == 0.0
    assert facts.memcpy_share == pytest.approx(0.8) and facts.h2d_bytes == 602112


def test_timed_busy_takes_kernel_time_per_step_to_the_rows_step_time():
    facts = health.measure_trace(traces.parse_events(torch_two_streams()))  # 0.45 ms of kernels in 1 ms
    row = {"window_steps": 2, "step_time_ms_median": 0.3}  # the traced steps took 0.5 ms each
    assert health.timed_busy(facts, row) == pytest.approx(0.75)
    assert health.health_columns(facts, row)["device_busy_share"] == pytest.approx(0.75)
    assert health.timed_busy(facts, {"window_steps": 2, "step_time_ms_median": 0.1}) == 1.0  # at most 1
    assert health.health_columns(facts, {})["device_busy_share"] == pytest.approx(0.45)  # no row: the window's
    text = health.render(facts, row, "t")
    assert "0.50 ms per traced step against 0.30 ms per timed step" in text and "75.0%" in text


# -- NVML: only samples of the timed windows, energy over them ----------------------------------------

def test_utilisation_counts_only_samples_whose_period_lies_in_a_window():
    monitor = gpu_monitor.GpuMonitor(nvml=None, handles=[0], interval_s=0.1)
    monitor.util_samples = [gpu_monitor.UtilSample(0.0, 0.2, 0.0),  # compiling, before the windows
                            gpu_monitor.UtilSample(1.0, 1.2, 96.0), gpu_monitor.UtilSample(1.2, 1.4, 98.0),
                            gpu_monitor.UtilSample(1.4, 1.6, 10.0)]  # straddles the window's end
    assert monitor.utilisation([(0.95, 1.5)]) == pytest.approx(97.0)
    assert monitor.utilisation([(0.95, 1.1)]) is None  # a window shorter than the period: no figure
    monitor.util_samples = []  # no driver samples: readings whose 1 s look-back fits a window
    monitor.samples = [gpu_monitor.Sample(t, u, 1000.0, 300.0, None) for t, u in ((0.5, 0.0), (2.5, 90.0))]
    assert monitor.utilisation([(1.0, 3.0)]) == 90.0
    summary = monitor.summary([(1.0, 3.0)])
    assert summary["nvml_power_w"] == 300.0 and summary["nvml_gpu_util_pct"] == 90.0
    assert monitor.summary([(5.0, 6.0)])["nvml_power_w"] is None  # never the whole run's mean


def test_energy_columns_need_every_window_and_two_seconds():
    spans = [(0.0, 1.5), (2.0, 3.5)]
    out = gpu_monitor.energy_columns([900.0, 1100.0], spans, images=4000, gpus=2)
    assert out == pytest.approx({"energy_j_per_image": 0.5, "mean_power_w": 2000 / 3.0 / 2})
    assert gpu_monitor.energy_columns([900.0, None], spans, 4000, 2)["energy_j_per_image"] is None
    assert gpu_monitor.energy_columns([100.0], [(0.0, 0.5)], 100, 1)["energy_j_per_image"] is None


def test_nvml_index_follows_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-1234abcd,GPU-99")
    assert gpu_monitor.nvml_index(1) == "GPU-99"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert gpu_monitor.nvml_index(0) == 2


# -- energy in the rows and the report -----------------------------------------------------------------

def test_energy_columns_end_the_row_and_older_files_read_without_them(tmp_path):
    assert schema.COLUMN_NAMES[-3:-1] == ("energy_j_per_image", "mean_power_w")  # schema 4, then skipped_inputs
    old = tmp_path / "old.csv"
    header = [c for c in schema.COLUMN_NAMES if c not in schema.ADDED_IN_V4]
    old.write_text(",".join(header) + "\n")
    frame = store.read_results([old])
    assert {"energy_j_per_image", "mean_power_w"} <= set(frame.columns)


def _rows() -> pd.DataFrame:
    base = {"status": "ok", "model": "resnet50", "strategy": "s", "precision": "bf16", "per_device_batch": 256,
            "devices": 1, "arrival_rate_rps": None, "variant": None, "mean_power_w": 600.0}
    rows = [{**base, "run_id": "a", "backend": "torch", "compile": False, "mode": "train", "device_type": "gpu",
             "images_per_sec": 4700.0, "energy_j_per_image": 0.15},
            {**base, "run_id": "b", "backend": "jax", "compile": False, "mode": "train", "device_type": "gpu",
             "images_per_sec": 7000.0, "energy_j_per_image": 0.10},
            {**base, "run_id": "c", "backend": "torch", "compile": False, "mode": "train", "device_type": "cpu",
             "images_per_sec": 50.0, "energy_j_per_image": None, "mean_power_w": None}]
    return pd.DataFrame(rows)


def test_energy_summary_names_the_most_efficient_configuration_and_why_rows_lack_it(tmp_path):
    text = energy.summary_markdown(_rows())
    assert "| resnet50 | jax/s | train | 256 | 10.00 | 7,000 | 600 |" in text
    assert "1 CPU row(s): no energy" in text

    class Drawn:  # what build_report hands energy.draw
        out_dir, files, tables, figures, notes, not_drawn = tmp_path, {}, {}, {}, {}, {}

    report = Drawn()
    energy.draw(report, _rows())
    assert (tmp_path / "energy.png").is_file()
    assert list(report.tables["energy"]["images_per_joule"].round(2)) == [10.0, 6.67]


# -- bad input: one line, exit 2 -----------------------------------------------------------------------

def _one_line_exit_2(done, *needles) -> None:
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    for needle in needles:
        assert needle in done.stderr


def test_health_bad_input_is_one_line_and_exit_2(tmp_path):
    rows = tmp_path / "rows.csv"
    store.append_rows(rows, [{"run_id": "abc", "status": "ok", "backend": "torch"}])
    _one_line_exit_2(run_cli("health", rows), "no profiled row")
    _one_line_exit_2(run_cli("health", rows, "nope"), "no row with run_id 'nope'")
    _one_line_exit_2(run_cli("health", "nope", "--csv", rows), "no row with run_id 'nope'")
    other = tmp_path / "other_tool"
    (other / "logs").mkdir(parents=True)
    (other / "logs" / "events.out.tfevents.1").write_bytes(b"\0\1")
    _one_line_exit_2(run_cli("health", other), "no trace.json")
    truncated = tmp_path / "cut"
    truncated.mkdir()
    (truncated / "trace.json").write_text(json.dumps({"traceEvents": torch_two_streams()})[:500])
    _one_line_exit_2(run_cli("health", truncated), "not a readable Chrome trace")
    gz = tmp_path / "cut_jax" / "plugins" / "profile" / "x" / "vm.trace.json.gz"
    gz.parent.mkdir(parents=True)
    gz.write_bytes(gzip.compress(json.dumps({"traceEvents": jax_gpu_trace()}).encode())[:200])
    _one_line_exit_2(run_cli("health", tmp_path / "cut_jax"), "not a readable Chrome trace")
    not_a_trace = tmp_path / "list.json"
    not_a_trace.write_text(json.dumps({"hello": 1}))
    _one_line_exit_2(run_cli("health", not_a_trace), "no trace events")
