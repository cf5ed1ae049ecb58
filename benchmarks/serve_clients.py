"""wrk beside `cnnbench load`: is the load generator the bound?

``wrk CSV URL SHAPE CONNECTIONS SECONDS``: runs Debian's wrk (closed loop, CONNECTIONS connections, raw
uint8 bodies of SHAPE to /v1/infer, each command under `timeout`), reads the server's /v1/info, and
appends one serve-http row with ``backend_options`` ``client=wrk``. It compares wrk's answered
requests/s with the last `cnnbench load` row of the same CSV (same server, same connection count, run
just before). The two clients measure the same thing only at saturation: `cnnbench load` is open loop
(it offers a rate), wrk closed loop (it sends as fast as answers come). So the comparison is made only
when that row answered less than SATURATED of what it offered; then, if the two differ by more than
10 %, the wrk row's ``errors_by_status`` carries ``client_bound=<cnnbench/wrk>`` and wrk's number is the
one to trust. Below saturation it carries ``not_compared=<answered/offered>`` instead: the offered rate,
not either client, was the bound.
"""

from __future__ import annotations

import csv
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cnnbench.serve.load import get_json, load_row  # noqa: E402
from cnnbench.serve.loadgen import HttpLoadResult  # noqa: E402

AGREEMENT = 0.10
SATURATED = 0.95  # a load row that answered less than this share of what it offered was at saturation
LUA = """wrk.method = "POST"
local f = io.open("{body}", "rb"); wrk.body = f:read("*a"); f:close()
wrk.headers["Content-Type"] = "application/octet-stream"
wrk.headers["X-Tensor-Shape"] = "{shape}"
wrk.headers["X-Tensor-Dtype"] = "uint8"
"""
_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def _ms(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text).groups()
    return float(value) * _UNITS[unit]


def run_wrk(url: str, shape: str, connections: int, seconds: int, threads: int) -> dict:
    folder = Path(tempfile.mkdtemp())
    dims = tuple(int(n) for n in shape.split(","))
    (folder / "body.bin").write_bytes(np.random.default_rng(0).integers(0, 256, dims, dtype=np.uint8).tobytes())
    (folder / "post.lua").write_text(LUA.format(body=folder / "body.bin", shape=shape))
    done = subprocess.run(["timeout", str(seconds + 30), "wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s",
                           "--latency", "-s", str(folder / "post.lua"), url + "/v1/infer"],
                          capture_output=True, text=True)
    return parse_wrk(done.stdout)


def parse_wrk(out: str) -> dict:
    """wrk's report -> rps (every response), requests, answered (200s per second), p50/p90/p99, errors."""
    found = {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
             "requests": int(re.search(r"(\d+) requests in", out).group(1))}
    for q in (50, 90, 99):
        match = re.search(rf"\s{q}(?:\.0+)?%\s+([\d.]+(?:us|ms|s))", out)
        found[f"p{q}"] = _ms(match.group(1)) if match else None
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    found["errors"] = {"non2xx": int(bad.group(1))} if bad else {}
    if errors:
        found["errors"].update({k: int(v) for k, v in zip(("connect", "read", "write", "timeout"), errors.groups())
                                if int(v)})
    # wrk's Requests/sec counts every response, 503s of a full queue too; `cnnbench load` counts the 200s
    # (3,397 503s in a 3 s run made wrk read 12,883/s where 11,787 were answered, 2026-12-05)
    found["ok"] = found["requests"] - found["errors"].get("non2xx", 0)
    found["answered"] = found["rps"] * found["ok"] / found["requests"] if found["requests"] else 0.0
    return found


def compare(ours: dict | None, wrk_rps: float) -> dict[str, float]:
    """What the wrk row says of the `cnnbench load` row before it: client_bound, not_compared or nothing."""
    if not ours or not wrk_rps:
        return {}
    answered, offered = float(ours.get("images_per_sec") or 0), float(ours.get("arrival_rate_rps") or 0)
    if offered and answered < SATURATED * offered:
        ratio = answered / wrk_rps
        return {"client_bound": round(ratio, 2)} if abs(ratio - 1) > AGREEMENT else {}
    return {"not_compared": round(answered / offered, 2) if offered else 0.0}


def main(csv_path: str, url: str, shape: str, connections: int, seconds: int) -> None:
    from cnnbench.table import store

    info = get_json(url, "/v1/info")[1]
    found = run_wrk(url, shape, connections, seconds, threads=min(8, connections))
    errors = dict(found["errors"])
    rows = list(csv.DictReader(open(csv_path))) if Path(csv_path).exists() else []
    ours = next((r for r in reversed(rows) if "client=wrk" not in (r.get("backend_options") or "")), None)
    ok, answered = found["ok"], found["answered"]
    verdict = compare(ours, answered)
    errors.update(verdict)
    result = HttpLoadResult(offered_rps=0.0, sent=found["requests"], ok=ok, achieved_rps=answered,
                            latency_ms=np.array([]), errors=errors, wall_s=float(seconds), client_lag_ms_p99=0.0)
    row = load_row(info, result, "raw", None)
    options = [row.get("backend_options"), f"client=wrk;connections={connections};wrk_rate=2xx"]
    row["backend_options"] = ";".join(filter(None, options))
    row.update({"latency_ms_p50": found["p50"], "latency_ms_p90": found["p90"], "latency_ms_p99": found["p99"],
                "status": "ok" if answered else "failed"})
    store.append_rows(Path(csv_path), [row])
    print(f"wrk -c{connections}: {answered:,.0f} answered 200/s ({found['rps']:,.0f} responses/s), p99 {found['p99']} "
          f"ms (all responses); cnnbench load: "
          f"{ours['images_per_sec'] if ours else '-'}; {_verdict_words(errors)}")


def _verdict_words(errors: dict) -> str:
    if "client_bound" in errors:
        return "client-bound"
    if "not_compared" in errors:
        return "not compared (cnnbench load was below saturation: offer more)"
    return "agree"


if __name__ == "__main__":
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
