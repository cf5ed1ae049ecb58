"""The serving peer (benchmarks/litserve_peer.py) on CPU: the same engine behind the real LitServe answers
raw and JPEG requests with the top-k, through the padded batch sizes it warms up, and stopping it leaves no
process of its group behind."""

import subprocess
import sys
from pathlib import Path

from cnnbench import envinfo
from cnnbench.table import store

ROOT = Path(__file__).resolve().parent.parent


def test_litserve_peer_answers_raw_and_jpeg_and_leaves_no_process(tmp_path):
    rows = tmp_path / "litserve_http.csv"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "litserve_peer.py"), "smoke", "--rows", str(rows)],
                          capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    for kind in ("raw", "jpeg"):
        assert f"litserve smoke {kind}: {{'classes': [" in done.stdout
    assert "the server and its workers are gone" in done.stdout
    # its row names what cnnbench's rows name: the commit, the card its worker ran on, the versions
    (row,) = store.read_rows(rows)
    assert row["status"] == "ok" and row["requests"] > 0 and row["variant"] == "litserve"
    assert row["git_sha"] == envinfo.git_sha() and row["device_name"] == envinfo.cpu_name()
    assert row["stack_versions"] == f"litserve={envinfo.package_version('litserve')}"
    assert row["backend_version"] == envinfo.package_version("torch")
