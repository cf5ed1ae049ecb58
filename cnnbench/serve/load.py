"""`cnnbench load`'s loop: wait for the server, offer each rate, complete one `serve-http` row per rate.

The server's ``/metrics`` read before and after each rate give the mean batch size of that rate's
requests, and where the engine's side spent the rate (printed: the CPU time of the process running the
engine per image, the host time of a launch and the launcher thread's own CPU time in it, the launcher's
idle share); ``/v1/info`` gives the configuration half of the row.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from cnnbench.errors import UserError
from cnnbench.serve import loadgen
from cnnbench.serve.http_client import check_loopback

ENGINE_COUNTERS = ("cnnbench_engine_process_cpu_seconds", "cnnbench_launcher_cpu_seconds", "cnnbench_launches")


def server_counters(metrics_text: str) -> dict[str, float]:
    """The server-wide counters of one /metrics reading that a rate's figures are differences of:
    ``images`` and ``batches`` (the batch-size histogram's sum and count), ``launcher_<state>`` (seconds,
    cnnbench.serve.metrics.LAUNCHER_STATES) and the ENGINE_COUNTERS without their prefix. A server
    without a batcher (`batching = "none"`) has no launcher series."""
    from prometheus_client.parser import text_string_to_metric_families

    found: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if family.name == "cnnbench_batch_size" and sample.name.endswith(("_sum", "_count")):
                found["images" if sample.name.endswith("_sum") else "batches"] = sample.value
            elif family.name == "cnnbench_launcher_seconds" and sample.name.endswith("_total"):
                found[f"launcher_{sample.labels['state']}"] = sample.value
            elif family.name in ENGINE_COUNTERS and sample.name.endswith("_total"):
                found[family.name.removeprefix("cnnbench_")] = sample.value
    return found


def engine_summary(before: dict[str, float], after: dict[str, float]) -> str | None:
    """Where the engine's side spent a rate, from two readings: the engine process's CPU per image (with
    front ends; without them the one server process's, HTTP included), the host time of one launch and
    the launcher thread's own CPU time in it (the rest it waited), and the share of the launcher's time it
    sat idle. None when the server says nothing of it."""
    from cnnbench.serve.metrics import LAUNCHER_STATES

    def delta(key: str) -> float:
        return after.get(key, 0.0) - before.get(key, 0.0)

    parts = []
    images = delta("images")
    if images > 0 and "engine_process_cpu_seconds" in after:
        parts.append(f"engine process {1e6 * delta('engine_process_cpu_seconds') / images:.0f} us CPU per image")
    launches, total = delta("launches"), sum(delta(f"launcher_{state}") for state in LAUNCHER_STATES)
    if launches > 0 and total > 0:
        parts.append(f"launch {1e3 * delta('launcher_launching') / launches:.2f} ms (launcher CPU "
                     f"{1e3 * delta('launcher_cpu_seconds') / launches:.2f} ms), launcher idle "
                     f"{1 - delta('launcher_launching') / total:.0%}")
    return ", ".join(parts) or None


def get_json(base: str, path: str, timeout_s: float = 10.0) -> tuple[int, Any]:
    import httpx

    response = httpx.get(base + path, timeout=timeout_s)
    is_json = "json" in response.headers.get("content-type", "")
    return response.status_code, response.json() if is_json else response.text


def wait_ready(base: str, timeout_s: float) -> dict[str, Any]:
    """Poll /healthz until the server is warm (or the time is up); then its /v1/info."""
    import httpx

    deadline, last = time.monotonic() + timeout_s, "no answer"
    while time.monotonic() < deadline:
        try:
            status, body = get_json(base, "/healthz")
            if status == 200:
                return get_json(base, "/v1/info")[1]
            last = f"{status} {body}"
            if isinstance(body, dict) and body.get("status") == "failed":
                break
        except httpx.HTTPError as exc:
            last = f"{type(exc).__name__}"
        time.sleep(0.2)
    raise UserError(f"load: {base} is not ready after {timeout_s:.0f} s ({last})")


def load_row(info: dict[str, Any], result: loadgen.HttpLoadResult, kind: str,
             mean_batch: float | None) -> dict[str, Any]:
    """One `serve-http` CSV row: the server's configuration half, completed with this load."""
    import datetime as dt
    import uuid

    row = dict(info["row"])
    if info.get("http_parser"):  # uvicorn's HTTP parser (httptools or h11) moves the ceiling
        row["backend_options"] = ";".join(filter(None, [row.get("backend_options"), f"http={info['http_parser']}"]))
    row.update({
        "run_id": uuid.uuid4().hex[:12], "timestamp_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "arrival_rate_rps": result.offered_rps, "requests_offered": result.sent, "requests": result.ok,
        "images_per_sec": result.achieved_rps, "images_per_sec_per_device": result.achieved_rps,
        "latency_ms_p50": result.percentile(50), "latency_ms_p90": result.percentile(90),
        "latency_ms_p99": result.percentile(99), "mean_batch": mean_batch, "request_input": kind,
        "errors_by_status": result.errors_text(), "client_lag_ms_p99": result.client_lag_ms_p99,
        "status": "ok" if result.ok else "failed",
        "error": None if result.ok else f"no request was answered 200 ({result.errors_text()})",
    })
    return row


def parse_source_size(text: str | None) -> tuple[int, int] | None:
    """``--source-size WxH`` -> (width, height)."""
    if not text:
        return None
    try:
        size = tuple(int(n) for n in text.lower().split("x"))
    except ValueError:
        size = ()
    if len(size) != 2 or min(size) <= 0:
        raise UserError(f"--source-size: expected WxH such as 500x375, found {text!r}")
    return size  # type: ignore[return-value]


def run_load(url: str, rates: list[float], requests: int, duration: float, kind: str, source_size: str | None,
             processes: int, connections: int, timeout: float, wait: float, seed: int, out: Path) -> list[dict]:
    """Offer each rate in turn, append one row per rate to ``out``; the rows."""
    from cnnbench.table import store

    if kind not in loadgen.INPUTS:
        raise UserError(f"--input: expected one of {', '.join(loadgen.INPUTS)}, found {kind!r}")
    size = parse_source_size(source_size)
    base = check_loopback(url)
    store.check_appendable(out)
    info = wait_ready(base, wait)
    bodies = loadgen.request_bodies(kind, tuple(info["image_shape"]), size, seed=seed)
    rows = []
    for offered in rates:
        before = server_counters(get_json(base, "/metrics")[1])
        result = loadgen.offer_load(base + "/v1/infer", bodies, offered, requests, duration, timeout,
                                    connections, processes, seed)
        after = server_counters(get_json(base, "/metrics")[1])
        batches = after.get("batches", 0.0) - before.get("batches", 0.0)
        mean_batch = (after.get("images", 0.0) - before.get("images", 0.0)) / batches if batches else None
        row = load_row(info, result, kind, mean_batch)
        store.append_rows(out, [row])
        rows.append(row)
        p50, p99 = result.percentile(50), result.percentile(99)
        print(f"{offered:g} req/s offered: {result.achieved_rps:.0f} answered/s, {result.ok}/{result.sent} ok, "
              f"p50 {p50 or float('nan'):.1f} ms, p99 {p99 or float('nan'):.1f} ms, mean batch "
              f"{mean_batch or float('nan'):.1f}, errors {result.errors_text() or 'none'}, client lag p99 "
              f"{result.client_lag_ms_p99:.1f} ms")
        engine = engine_summary(before, after)
        if engine:
            print(f"  engine side: {engine}")
    print(f"appended {len(rows)} row(s) to {out}")
    return rows
