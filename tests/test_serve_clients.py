"""benchmarks/serve_clients.py: wrk and `cnnbench load` are compared only at saturation."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).parents[1] / "benchmarks/serve_clients.py"
spec = importlib.util.spec_from_file_location("serve_clients", SCRIPT)
serve_clients = importlib.util.module_from_spec(spec)
spec.loader.exec_module(serve_clients)


def load_row(answered: float, offered: float) -> dict:
    return {"images_per_sec": str(answered), "arrival_rate_rps": str(offered)}


def test_saturated_clients_that_disagree_flag_the_row_client_bound() -> None:
    assert serve_clients.compare(load_row(6_000, 16_000), 10_000) == {"client_bound": 0.6}


def test_saturated_clients_that_agree_flag_nothing() -> None:
    assert serve_clients.compare(load_row(9_500, 16_000), 10_000) == {}


def test_below_saturation_the_rows_are_not_compared() -> None:
    # cnnbench load got all it offered (8,000 of 8,000): the offered rate was the bound, not the client
    assert serve_clients.compare(load_row(7_980, 8_000), 10_000) == {"not_compared": 1.0}
    assert serve_clients.compare(None, 10_000) == {}


WRK_REPORT = """Running 3s test @ http://127.0.0.1:8100/v1/infer
  8 threads and 512 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    40.12ms    5.10ms  90.00ms   80.00%
  Latency Distribution
     50%   43.29ms
     75%   43.60ms
     90%   43.83ms
     99%   46.11ms
  39934 requests in 3.10s, 6.51MB read
  Non-2xx or 3xx responses: 3397
Requests/sec:  12882.58
Transfer/sec:      2.10MB
"""


def test_wrk_counts_every_response_so_the_row_counts_only_the_200s() -> None:
    found = serve_clients.parse_wrk(WRK_REPORT)
    assert found["rps"] == 12882.58 and found["errors"] == {"non2xx": 3397}
    assert found["ok"] == 39934 - 3397
    assert round(found["answered"]) == round(12882.58 * 36537 / 39934)  # 11,787 answered 200 per second
    assert (found["p50"], found["p99"]) == (43.29, 46.11)
