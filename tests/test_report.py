"""Charts are checked by what they plot: values read back from the matplotlib axes equal the CSV's."""

from __future__ import annotations

import numpy as np
import pytest
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


def test_charts_plot_the_aggregated_values(tmp_path):
    csv = tmp_path / "fx.csv"
    _fixture(csv)
    report = build_report([csv], tmp_path / "out")
    for name in ("throughput", "efficiency", "first_step", "step_time", "accuracy_time", "memory"):
        assert all(p.stat().st_size > 0 for p in report.files[name])
    ax = report.figures["throughput"].axes[0]
    x, y = _line(ax, "torch/ddp")
    assert list(x) == [1, 2, 4] and list(y) == [1000, 1800, 3000]  # medians over trials, failed row ignored
    assert EMULATED_NOTE in ax.get_title()
    ax = report.figures["efficiency"].axes[0]
    x, y = _line(ax, "torch/ddp")
    np.testing.assert_allclose(y, [1.0, 1800 / 2000, 3000 / 4000])
    _, y = _line(ax, "jax/sharded")
    np.testing.assert_allclose(y, [1.0, 1700 / 1800])
    bars = report.figures["first_step"].axes[0].patches
    assert sorted(round(b.get_height(), 6) for b in bars) == [0.5, 3.0]  # jax: median of 2, 3, 4
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
