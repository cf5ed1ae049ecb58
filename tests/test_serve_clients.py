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
