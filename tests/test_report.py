"""Charts are checked by what they plot: values read back from the matplotlib axes equal the CSV's."""

from __future__ import annotations

import re

import numpy as np
import pytest
import report_rows
from conftest import run_cli

from cnnbench.errors import ResultsFileError
from cnnbench.report.train import EMULATED_NOTE, build_report
from cnnbench.table import store

# images/s per (backend, devices, trial): medians 1000/1800/3000 (torch), 900/1700 (jax)
IPS = {("torch", 1): [990, 1010, 1000], ("torch", 2): [1800, 1700, 1900], ("torch", 4): [3000, 3100, 2900],
       ("jax", 1): [900, 900, 900], ("jax", 2): [1700, 1650, 1750]}


def _fixture(path):
    rows, history = [], []
    for (backend, devices), values in IPS.items():
        for trial, ips in enumerate(values):
            run_id = f"{backend}{devices}{trial}"
            rows.append({
                "schema_version": 1, "run_id": run_id, "spec_name": "fx", "spec_hash": "h", "trial": trial,
                "backend": backend, "strategy": "ddp" if backend == "torch" else "sharded", "compile": False,
                "scaling": "weak", "model": "smallcnn", "dataset": "digits", "precision": "fp32",
                "device_type": "cpu" if devices == 1 else "cpu-emulated", "devices": devices, "hosts": 1,
                "per_device_batch": 32, "global_batch": 32 * devices, "images_per_sec": ips,
                "step_time_ms_median": 32 * devices / ips * 1000, "step_time_ms_p10": 1.0, "step_time_ms_p90": 99.0,
                "first_step_s": 2.0 + trial if backend == "jax" else 0.5, "peak_memory_mb": 100.0 * devices,
                "test_accuracy": 0.9, "status": "ok",
            })
            if (backend, devices, trial) == ("jax", 1, 0):
                history += [{"epoch": e, "wall_s": e * 1.0, "train_loss": 1.0 / e, "test_loss": 1.0 / e,
                             "test_accuracy": 0.5 + 0.1 * e} for e in (1, 2, 3)]
    rows.append({**rows[0], "run_id": "bad", "status": "failed", "images_per_sec": 1.0})
    store.append_rows(path, rows)
    store.append_history(path, "jax10", history)


def _line(ax, label_start):
    """The data of the one plotted series whose legend label starts with label_start."""
    lines = [c.lines[0] for c in ax.containers if c.get_label().startswith(label_start)]  # error bars
    lines += [ln for ln in ax.get_lines() if ln.get_label().startswith(label_start)]
    (line,) = lines
    return list(line.get_xdata()), list(line.get_ydata())


def _labelled_lines(ax) -> dict:
    """Legend label -> data line, for plain lines and error-bar lines alike."""
    lines = {c.get_label(): c.lines[0] for c in ax.containers if getattr(c, "lines", None) and c.lines[0]}
    lines.update({ln.get_label(): ln for ln in ax.get_lines() if not ln.get_label().startswith("_")})
    return lines


def test_charts_plot_the_aggregated_values(tmp_path):
    csv = tmp_path / "fx.csv"
    _fixture(csv)
    report = build_report([csv], tmp_path / "out")
    for name in ("throughput", "efficiency", "first_step", "step_time", "accuracy_time", "memory"):
        assert all(p.stat().st_size > 0 for p in report.files[name])
    ax = report.figures["throughput"].axes[0]
    x, y = _line(ax, "torch/ddp")
    assert list(x) == [1, 2, 4] and list(y) == [1000, 1800, 3000]  # medians over trials, failed row ignored
    assert EMULATED_NOTE in report.figures["throughput"].get_suptitle()
    ax = report.figures["efficiency"].axes[0]
    x, y = _line(ax, "torch/ddp")
    np.testing.assert_allclose(y, [1.0, 1800 / 2000, 3000 / 4000])
    _, y = _line(ax, "jax/sharded")
    np.testing.assert_allclose(y, [1.0, 1700 / 1800])
    _, y = _line(report.figures["first_step"].axes[0], "jax/sharded")
    assert list(y) == [3.0, 3.0]  # jax: median of 2, 3, 4 at each device count
    x, y = _line(report.figures["accuracy_time"].axes[0], "jax/sharded")
    assert list(x) == [1.0, 2.0, 3.0] and list(y) == pytest.approx([0.6, 0.7, 0.8])
    _, y = _line(report.figures["memory"].axes[0], "torch/ddp")
    assert list(y) == [100, 200, 400]
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "| fx | smallcnn | weak | torch/ddp | 4 | 3,000 | 0.75 |" in summary


def test_filters_and_errors(tmp_path):
    csv = tmp_path / "fx.csv"
    _fixture(csv)
    with pytest.raises(ResultsFileError, match="no rows match"):
        build_report([csv], tmp_path / "o", model="resnet50")
    bad = tmp_path / "bad.csv"
    bad.write_text("run_id,backend\n1,torch\n")
    done = run_cli("report", bad, "--out", tmp_path / "o2")
    assert done.returncode == 2 and "missing required columns" in done.stderr
    assert done.stderr.strip().count("\n") == 0
    done = run_cli("report", csv, "--out", tmp_path / "o3", "--device-type", "gpu")
    assert done.returncode == 2 and "no rows match" in done.stderr


def _texts(ax):
    return [t.get_text() for t in ax.texts]


def _legend_labels(fig):
    return [t.get_text() for legend in fig.legends for t in legend.get_texts()]


def test_one_device_count_draws_bars_per_model_with_the_spread_and_the_values(tmp_path):
    csv = tmp_path / "one.csv"
    report_rows.single_device_models(csv)
    report = build_report([csv], tmp_path / "out")
    fig = report.figures["throughput"]
    assert [ax.get_title() for ax in fig.axes] == ["resnet18_cifar", "resnet50"]  # models never share an axis
    r50 = fig.axes[1]
    heights = [round(p.get_height()) for p in r50.patches]
    assert heights == [4600, 6500, 7100]  # torch eager, torch compiled, jax: one bar each, frameworks in order
    assert ["4,600", "6,500", "7,100"] == _texts(r50)
    # error bars: images/s at the windows' p90 and p10 step times (p10 = 0.9 x, p90 = 1.2 x the median)
    segments = [c.lines[2][0].get_segments()[0] for c in r50.containers if hasattr(c, "has_yerr") and c.has_yerr]
    np.testing.assert_allclose([s[:, 1] for s in segments][0], [4600 / 1.2, 4600 / 0.9], rtol=1e-6)
    # one colour family per framework, the same in every chart
    colours = {label: p.get_facecolor() for p, label in zip(r50.patches, ["t", "tc", "j"])}
    assert colours["t"][:3] == colours["tc"][:3] and colours["t"] != colours["j"]
    step = report.figures["step_time"].axes[1]
    assert step.patches[0].get_facecolor() == r50.patches[0].get_facecolor()
    # the legend is outside every panel
    (legend,) = fig.legends
    fig.canvas.draw()
    right_edge = max(ax.get_window_extent().x1 for ax in fig.axes)
    assert legend.get_window_extent().x0 >= right_edge


def test_titles_promise_only_what_is_drawn(tmp_path):
    """#26.7: one device count draws no ideal-linear line, so neither title nor legend may mention one."""
    csv = tmp_path / "one.csv"
    report_rows.single_device_models(csv)
    report = build_report([csv], tmp_path / "out")
    fig = report.figures["throughput"]
    words = " ".join([fig.get_suptitle(), *(ax.get_title() for ax in fig.axes), *_legend_labels(fig)]).lower()
    assert "ideal" not in words and "dotted" not in words
    assert "efficiency" not in report.files and "one device count" in report.not_drawn["efficiency"]

    csv = tmp_path / "sweep.csv"
    report_rows.scaling_sweep(csv)
    report = build_report([csv], tmp_path / "out2")
    fig = report.figures["throughput"]
    assert [ax.get_title() for ax in fig.axes] == ["smallcnn · strong scaling", "smallcnn · weak scaling"]
    assert any("ideal linear" in label for label in _legend_labels(fig))
    weak = fig.axes[1]
    ideal = [ln for ln in weak.get_lines() if ln.get_label() == "_ideal"]
    x, y = _line(weak, "torch/ddp")
    assert len(ideal) == 2 and list(ideal[0].get_xdata()) == [1, 2, 4]
    np.testing.assert_allclose(ideal[0].get_ydata(), [y[0] * n for n in (1, 2, 4)])


def test_the_ablation_is_signed_one_way_everywhere_and_marks_skipped_toggles(tmp_path):
    """#26.5: negative = faster in the chart, its axis label and ablation.md; #26.7: skipped toggles shown."""
    csv = tmp_path / "infer.csv"
    report_rows.inference(csv)
    report = build_report([csv], tmp_path / "out")
    ax = report.figures["ablation"].axes[0]
    assert "negative = faster" in ax.get_ylabel()
    toggles = [t.get_text() for t in ax.get_xticklabels()]
    assert toggles == ["compile", "bf16", "pad"]
    # bars in order: compile (torch, jax), bf16 (torch, jax), pad (torch, jax); baseline 10 ms
    heights = [round(p.get_height(), 6) for p in ax.patches]
    assert heights == [-4.0, 0.0, -2.0, -2.0, 2.0, 2.0]
    texts = _texts(ax)
    assert "skipped" in texts and "-4.00\n1.67x" in texts and "+2.00\n0.83x" in texts
    assert any("jax compile: skipped: jax always jits" in n for n in report.notes["ablation"])
    table = (tmp_path / "out" / "ablation.md").read_text()
    assert "negative = faster" in table
    assert "| resnet50 | torch | 50 | bf16 | 8.000 | -2.000 | 1.25x |" in table
    assert "| resnet50 | torch | 50 | pad | 12.000 | +2.000 | 0.83x |" in table
    assert "jax compile (resnet50): skipped: jax always jits" in table


def test_the_results_page_ablation_table_uses_the_same_sign(tmp_path):
    """#26.5: in docs/results.md's ablation table a speed-up above 1 is a negative change, below 1 a positive one."""
    page = (report_rows.REPO / "docs" / "results.md").read_text()
    cells = re.findall(r"([+-]\d+\.\d+) ms \((\d+\.\d+)x\)", page)
    assert len(cells) >= 10
    for change, speedup in cells:
        assert (float(change) < 0) == (float(speedup) > 1), (change, speedup)
    assert "negative = faster" in page


def test_inference_bars_at_one_batch_size_log2_axes_at_several(tmp_path):
    csv = tmp_path / "one.csv"
    report_rows.inference(csv, batches=(64,))
    ax = build_report([csv], tmp_path / "o1").figures["infer_throughput"].axes[0]
    assert ax.get_xscale() == "linear" and len(ax.patches) == 2
    csv = tmp_path / "many.csv"
    report_rows.inference(csv)
    report = build_report([csv], tmp_path / "o2")
    ax = report.figures["infer_throughput"].axes[0]
    assert ax.get_xscale() == "log" and [t.get_text() for t in ax.get_xticklabels()] == ["1", "8", "64"]
    x, y = _line(ax, "torch bf16")
    np.testing.assert_allclose(y, [b / (2.0 + 0.5 * b) * 1000 for b in (1, 8, 64)], rtol=1e-5)


def test_serving_latency_marks_saturation_and_tells_the_modes_apart(tmp_path):
    csv = tmp_path / "serve.csv"
    report_rows.inference(csv)
    report = build_report([csv], tmp_path / "out")
    p50 = report.figures["serve_latency"].axes[0]
    lines = {ln.get_label(): ln for ln in p50.get_lines()}
    assert {"torch dynamic (in-process)", "torch batch1 (in-process)", "torch dynamic raw (HTTP)",
            "torch batch1 raw (HTTP)", "torch dynamic jpeg (HTTP)"} <= set(lines)
    assert lines["torch dynamic (in-process)"].get_linestyle() != lines["torch dynamic raw (HTTP)"].get_linestyle()
    marks = sorted(float(c.get_offsets()[0][0]) for c in p50.collections)
    # batch1 falls over at 1,000 req/s (in-process: a growing queue; HTTP: a third 503), dynamic at 3,000,
    # dynamic with JPEG bodies (decoding) at 1,000
    assert marks == [1000.0, 1000.0, 1000.0, 3000.0, 3000.0]
    assert any(label.startswith("first saturated") for label in _legend_labels(report.figures["serve_latency"]))
    notes = report.notes["serve_throughput"]
    assert "resnet50 torch batch1 raw (HTTP): saturated at 1,000 req/s offered (2,000 of 3,000 requests answered)" \
        in notes


def test_saturation_compares_answered_with_the_requests_actually_offered(tmp_path):
    """#32.4: at 100 req/s the Poisson draw offered 264 requests in the 3 s window, all answered: 88
    answered/s is under 90% of the nominal rate, yet nothing saturated."""
    csv = tmp_path / "serve.csv"
    report_rows.inference(csv)
    report = build_report([csv], tmp_path / "out")
    table = report.tables["serve"]
    low = table[table["arrival_rate_rps"] == 100.0]
    assert (low["achieved"] < 0.9 * 100.0).all() and (low["saturated"] == "").all()
    ax = report.figures["serve_throughput"].axes[0]
    assert all(float(c.get_offsets()[0][0]) > 100.0 for c in ax.collections)


def test_raw_and_jpeg_requests_of_one_backend_are_separate_lines(tmp_path):
    """#32.4: they are different workloads (the server decodes JPEGs): never one line, each its marker."""
    csv = tmp_path / "serve.csv"
    report_rows.inference(csv)
    ax = build_report([csv], tmp_path / "out").figures["serve_throughput"].axes[0]
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    raw, jpeg = lines["torch dynamic raw (HTTP)"], lines["torch dynamic jpeg (HTTP)"]
    assert len(raw.get_xdata()) == len(jpeg.get_xdata()) == 3
    assert raw.get_marker() != jpeg.get_marker()
    np.testing.assert_allclose(jpeg.get_ydata(), [88.0, 500.0, 500.0])


def test_dashed_lines_mean_compiled_and_nothing_else(tmp_path):
    """#32.4: the HTTP front-end, a second spec or batch size, and the device count of the accuracy
    curves are told apart otherwise (dash-dots, fainter lines with a legend entry, markers)."""
    csv = tmp_path / "serve.csv"
    report_rows.inference(csv)
    two_specs = tmp_path / "specs.csv"
    report_rows.scaling_sweep(two_specs)
    rows = store.read_rows(two_specs)
    store.append_rows(two_specs, [{**r, "run_id": r["run_id"] + "b", "spec_name": "other", "spec_hash": "h2",
                                   "images_per_sec": r["images_per_sec"] * 0.9} for r in rows])
    report = build_report([csv, two_specs], tmp_path / "out")
    for name, fig in report.figures.items():
        for ax in fig.axes:
            for label, line in _labelled_lines(ax).items():
                assert line.get_linestyle() != "--" or "+compile" in label, (name, label)
    lines = _labelled_lines(report.figures["throughput"].axes[1])  # weak scaling
    mine, other = lines["torch/ddp [fx]"], lines["torch/ddp [other]"]
    assert mine.get_linestyle() == other.get_linestyle() == "-"
    assert (mine.get_alpha() or 1.0) > other.get_alpha()
    assert any(label.startswith("fainter: another spec") for label in _legend_labels(report.figures["throughput"]))
    fx = tmp_path / "fx.csv"
    _fixture(fx)
    accuracy = build_report([fx], tmp_path / "acc").figures["accuracy_time"].axes[0]
    assert {ln.get_linestyle() for ln in accuracy.get_lines()} == {"-"}


def test_the_inputs_of_an_inference_sweep_are_distinct_series_under_a_true_title(tmp_path):
    """#32.4: `float32_pageable` and `resident` (one backend, one precision) differ in colour and marker,
    and the title does not say "host input copied each batch" of the resident one."""
    csv = tmp_path / "inputs.csv"
    rows = [report_rows.infer_row(f"{source}{b}", "torch", source, b, ms * b, precision="bf16")
            for source, ms in (("resident", 0.2), ("float32_pageable", 0.5)) for b in (1, 8, 64)]
    store.append_rows(csv, rows)
    fig = build_report([csv], tmp_path / "out").figures["infer_throughput"]
    lines = _labelled_lines(fig.axes[0])
    resident, pageable = lines["torch bf16 resident"], lines["torch bf16 float32_pageable"]
    assert resident.get_color() != pageable.get_color() and resident.get_marker() != pageable.get_marker()
    title = fig.get_suptitle()
    assert "resident on the device" in title and "host input copied each batch" not in title
    store.append_rows(csv := tmp_path / "host.csv", rows[3:])
    title = build_report([csv], tmp_path / "host").figures["infer_throughput"].get_suptitle()
    assert "float32 input copied from pageable host memory each batch" in title and "resident" not in title
