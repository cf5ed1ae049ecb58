"""GPU paths (skipped where nvidia-smi finds no GPU): PyTorch DDP over NCCL and JAX on one GPU."""

from __future__ import annotations

import pytest
from conftest import REPO, run_cli

from cnnbench.table import store

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_resnet18_bf16_on_one_gpu(tmp_path, backend):
    out = tmp_path / "gpu.csv"
    done = run_cli("run", REPO / "experiments" / "resnet18_synthetic.toml", "--devices", "1", "-b", backend,
                   "--out", out, "--no-report", timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = store.read_rows(out)
    assert rows and all(r["status"] == "ok" and r["device_type"] == "gpu" for r in rows)
    assert all(r["params"] == 11_173_962 and r["peak_memory_mb"] > 0 for r in rows)
