"""The notebooks run against the committed CSVs, stay paired with their .py, and agree with the report."""

from __future__ import annotations

import json
import os

import jupytext
import nbformat
import pytest
from conftest import REPO
from nbclient import NotebookClient

from cnnbench.report.train import aggregate, efficiency, load


def _execute(name: str, csv: str, tmp_path) -> dict:
    out = tmp_path / f"{name}.json"
    notebook = nbformat.read(REPO / "notebooks" / f"{name}.ipynb", as_version=4)
    os.environ["CNNBENCH_CSV"], os.environ["CNNBENCH_NOTEBOOK_OUT"] = str(REPO / csv), str(out)
    try:
        NotebookClient(notebook, timeout=600, kernel_name="python3",
                       resources={"metadata": {"path": str(REPO)}}).execute()
    finally:
        del os.environ["CNNBENCH_CSV"], os.environ["CNNBENCH_NOTEBOOK_OUT"]
    return json.loads(out.read_text())


@pytest.mark.parametrize("name", ["scaling_study", "framework_comparison"])
def test_notebook_is_paired_with_its_script(name):
    script = jupytext.read(REPO / "notebooks" / f"{name}.py")
    notebook = jupytext.read(REPO / "notebooks" / f"{name}.ipynb")
    assert [c.source for c in script.cells] == [c.source for c in notebook.cells]


def test_scaling_study_efficiency_equals_the_report(tmp_path):
    csv = "results/digits_scaling.csv"
    found = _execute("scaling_study", csv, tmp_path)
    expected = efficiency(aggregate(load([REPO / csv])))
    assert len(found["efficiency"]) == len(expected) > 0
    for row in expected.itertuples():
        batch = row.per_device_batch if row.scaling == "weak" else row.global_batch
        (match,) = [e for e in found["efficiency"] if (e["label"], e["scaling"], e["devices"], e["batch"])
                    == (row.label, row.scaling, row.devices, batch)]
        assert match["efficiency"] == pytest.approx(row.efficiency, rel=1e-9)
    assert found["amdahl"] and all(0 <= f["serial_fraction"] <= 1 for f in found["amdahl"])


def test_framework_comparison_runs(tmp_path):
    found = _execute("framework_comparison", "results/quickstart.csv", tmp_path)
    assert {"torch/ddp", "tensorflow/mirrored", "jax/sharded"} <= set(found["labels"])
    assert all(0 <= share < 1 for share in found["overhead_share"])
