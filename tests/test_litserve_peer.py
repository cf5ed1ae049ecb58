"""The serving peer (benchmarks/litserve_peer.py) on CPU: the same engine behind the real LitServe answers
raw and JPEG requests with the top-k, through the padded batch sizes it warms up, and stopping it leaves no
process of its group behind."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_litserve_peer_answers_raw_and_jpeg_and_leaves_no_process():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "litserve_peer.py"), "smoke"],
                          capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    for kind in ("raw", "jpeg"):
        assert f"litserve smoke {kind}: {{'classes': [" in done.stdout
    assert "the server and its workers are gone" in done.stdout
