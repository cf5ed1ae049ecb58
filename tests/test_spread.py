"""Noisy measurements are flagged: a row's window spread (p90/p10 - 1) and the spread of a configuration's
trials, in the run's summary line and in the report's summary.md; quiet ones are not."""

from __future__ import annotations

import pytest

from cnnbench.expand import expand
from cnnbench.report.train import build_report
from cnnbench.run.execute import _summary
from cnnbench.run.rows import outcome_row
from cnnbench.runs import Outcome
from cnnbench.spec import parse_spec_text, spec_hash
from cnnbench.table import store
from cnnbench.table.spread import noisy_note, step_time_spread

SPEC = """
name = "noise"
model = "smallcnn"
dataset = "synthetic"
backends = ["torch"]
device = "cpu"
per_device_batch = 8
"""


def _row(p10: float, p90: float, spec_text: str = SPEC) -> tuple[dict, float]:
    (run,) = expand(parse_spec_text(spec_text, "noise.toml"))
    result = {"step_time_ms_median": (p10 + p90) / 2, "step_time_ms_p10": p10, "step_time_ms_p90": p90,
              "images_per_sec": 1000.0, "images_per_sec_per_device": 1000.0, "first_step_s": 1.0,
              "window_step_ms": [p10, p90]}
    return outcome_row(run, Outcome("ok", result=result)), run.spread_limit


def test_spread_is_p90_over_p10_minus_one():
    assert step_time_spread(10.0, 14.0) == pytest.approx(0.4)
    assert step_time_spread(None, 3.0) is None and step_time_spread(0.0, 3.0) is None


def test_a_large_spread_is_flagged_in_the_row_and_the_summary_line_and_a_small_one_is_not():
    noisy, limit = _row(10.0, 14.0)
    assert noisy["step_time_spread"] == pytest.approx(0.4) and limit == 0.2
    assert "spread 40%: the machine was busy; rerun or add windows" in _summary(noisy, limit)
    quiet, limit = _row(10.0, 10.5)
    assert quiet["step_time_spread"] == pytest.approx(0.05)
    assert "spread" not in _summary(quiet, limit)
    assert noisy_note(0.15) is None and noisy_note(0.25) is not None


def test_the_limit_comes_from_the_spec_and_does_not_change_the_spec_hash():
    strict = SPEC + "[timing]\nspread_limit = 0.01\n"
    row, limit = _row(10.0, 10.5, strict)
    assert limit == 0.01 and "spread 5%" in _summary(row, limit)
    assert spec_hash(parse_spec_text(strict, "a.toml")) == spec_hash(parse_spec_text(SPEC, "b.toml"))


def test_report_summary_lists_noisy_runs_and_trials_only(tmp_path):
    base = {"schema_version": 3, "spec_name": "fx", "spec_hash": "h", "mode": "train", "scaling": "weak",
            "model": "smallcnn", "dataset": "digits", "precision": "fp32", "compile": False, "hosts": 1,
            "per_device_batch": 32, "first_step_s": 1.0, "status": "ok", "step_time_ms_median": 10.0}
    rows = [
        {**base, "run_id": "quiet", "backend": "torch", "strategy": "ddp", "devices": 1, "device_type": "cpu",
         "global_batch": 32, "trial": 0, "images_per_sec": 3200.0, "step_time_ms_p10": 10.0,
         "step_time_ms_p90": 10.5, "step_time_spread": 0.05},
        {**base, "run_id": "windows", "backend": "jax", "strategy": "sharded", "devices": 1, "device_type": "cpu",
         "global_batch": 32, "trial": 0, "images_per_sec": 3000.0, "step_time_ms_p10": 10.0,
         "step_time_ms_p90": 15.0, "step_time_spread": 0.5},
    ]
    rows += [{**base, "run_id": f"trial{t}", "backend": "torch", "strategy": "ddp", "devices": 2,
              "device_type": "cpu-emulated", "global_batch": 64, "trial": t, "images_per_sec": ips,
              "step_time_ms_p10": 10.0, "step_time_ms_p90": 10.5, "step_time_spread": 0.05}
             for t, ips in enumerate([4684.0, 18590.0, 24948.0])]
    csv = tmp_path / "r.csv"
    store.append_rows(csv, rows)
    summary = (build_report([csv], tmp_path / "charts").out_dir / "summary.md").read_text()
    noisy = summary.split("## Noisy measurements", 1)[1]
    assert "jax/sharded smallcnn x1 b32 fp32, trial 0: spread 50%: the machine was busy" in noisy
    assert "torch/ddp smallcnn x2 b64 fp32: 3 trials gave 4,684, 18,590, 24,948 img/s" in noisy
    assert "x1 b32 fp32, trial 0: spread 5%" not in noisy and "torch/ddp smallcnn x1" not in noisy
    quiet = (build_report([csv], tmp_path / "lax", spread_limit=10.0).out_dir / "summary.md").read_text()
    assert "Noisy" not in quiet
