"""`cnnbench load URL`: open-loop Poisson load over real HTTP (httpx, asyncio), loopback only.

Each request is sent at its scheduled time whether or not earlier ones have been answered, and its
latency runs from that scheduled time to its answer (no coordinated omission: a server that falls
behind shows as latency, not as a politely slower client). One Python process sends a few thousand
requests a second at most; ``processes`` > 1 splits the rate over several processes (the sum of
independent Poisson processes is a Poisson process of the summed rate), all on the same clock
(``time.monotonic`` is system-wide on Linux). The server's ``/metrics`` read before and after give the
mean batch size of the requests of this load.
"""

from __future__ import annotations

import asyncio
import ipaddress
import multiprocessing
import socket
import time
import urllib.parse
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from cnnbench.errors import UserError
from cnnbench.infer.serving import poisson_arrivals

INPUTS = ("raw", "jpeg", "png")


def check_loopback(url: str) -> str:
    """The base URL (scheme://host:port) of a loopback server; anything else is refused."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme != "http" or not parsed.hostname:
        raise UserError(f"load: expected a URL such as http://127.0.0.1:8000, found {url!r}")
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(parsed.hostname, parsed.port or 80)}
    except OSError as exc:
        raise UserError(f"load: cannot resolve {parsed.hostname!r}: {exc}") from None
    outside = [a for a in addresses if not ipaddress.ip_address(a.split("%")[0]).is_loopback]
    if outside:
        raise UserError(f"load: {parsed.hostname} is not a loopback address ({', '.join(sorted(outside))}); "
                        f"the load generator only targets this machine (127.0.0.1, ::1, localhost)")
    return f"http://{parsed.netloc}"


def sample_images(shape: tuple[int, int, int], count: int, seed: int) -> list[np.ndarray]:
    """Photograph-like uint8 HWC images: scikit-image's sample photographs where installed (JPEG
    sizes and decode costs of real pictures), else smooth random fields (never pure noise, which
    JPEG cannot compress)."""
    import cv2

    height, width, channels = shape
    pictures: list[np.ndarray] = []
    try:
        from skimage import data

        pictures = [getattr(data, name)() for name in ("astronaut", "coffee", "chelsea", "rocket")]
        pictures = [p if p.ndim == 3 else np.repeat(p[:, :, None], 3, axis=2) for p in pictures]
    except ImportError:
        rng = np.random.default_rng(seed)
        pictures = [cv2.resize(rng.integers(0, 256, (12, 16, 3), dtype=np.uint8), (640, 480),
                               interpolation=cv2.INTER_CUBIC) for _ in range(4)]
    out = []
    for i in range(count):
        image = cv2.resize(pictures[i % len(pictures)][:, :, :3], (width, height), interpolation=cv2.INTER_AREA)
        if i >= len(pictures):  # more images than pictures: shifted copies, so no two bodies are equal
            image = np.roll(image, 7 * i, axis=1)
        out.append(cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)[:, :, None] if channels == 1 else image)
    return out


def request_bodies(kind: str, model_shape: tuple[int, int, int], source_size: tuple[int, int] | None,
                   count: int = 16, seed: int = 0) -> list[tuple[bytes, dict[str, str]]]:
    """Bodies and headers for /v1/infer: raw tensors of the model's shape, or encoded pictures of
    ``source_size`` (width, height; default the model's) that the server decodes and resizes."""
    from cnnbench.infer.images import encode_image

    if kind == "raw":
        headers = {"content-type": "application/octet-stream", "x-tensor-dtype": "uint8",
                   "x-tensor-shape": ",".join(map(str, model_shape))}
        return [(image.tobytes(), headers) for image in sample_images(model_shape, count, seed)]
    width, height = source_size or (model_shape[1], model_shape[0])
    images = sample_images((height, width, model_shape[2]), count, seed)
    return [(encode_image(image, kind), {"content-type": f"image/{kind}"}) for image in images]


@dataclass(frozen=True)
class LoadPlan:
    url: str  # the /v1/infer URL
    rate_rps: float
    requests: int
    max_duration_s: float
    timeout_s: float
    connections: int
    seed: int


async def _offer(plan: LoadPlan, bodies: list[tuple[bytes, dict[str, str]]],
                 start: float) -> list[tuple[float, float, float, str]]:
    import httpx

    offsets = poisson_arrivals(plan.rate_rps, plan.requests, plan.max_duration_s, plan.seed)
    limits = httpx.Limits(max_connections=plan.connections, max_keepalive_connections=plan.connections)
    # Requests past the connection count wait on a semaphore (a FIFO, O(1) per request), not in httpx's
    # pool, whose wait list is scanned on every change and made this client the bound at a few hundred
    # requests a second. Waiting either way counts in the latency: it runs from the scheduled time.
    free = asyncio.Semaphore(plan.connections)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(plan.timeout_s)) as client:

        async def one(index: int, scheduled: float) -> tuple[float, float, float, str]:
            body, headers = bodies[index % len(bodies)]
            async with free:
                sent = time.monotonic()  # later than scheduled when the client or the server is behind
                try:
                    status = str((await client.post(plan.url, content=body, headers=headers)).status_code)
                except httpx.TimeoutException:
                    status = "timeout"
                except httpx.HTTPError:
                    status = "connection"
            return scheduled, sent, time.monotonic(), status

        tasks = []
        for index, offset in enumerate(offsets):
            scheduled = start + float(offset)
            delay = scheduled - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(index, scheduled)))
        return list(await asyncio.gather(*tasks))


def _offer_in_process(plan: LoadPlan, bodies: list[tuple[bytes, dict[str, str]]],
                      start: float) -> list[tuple[float, float, float, str]]:
    try:
        import uvloop

        return uvloop.run(_offer(plan, bodies, start))
    except ImportError:
        return asyncio.run(_offer(plan, bodies, start))


@dataclass(frozen=True)
class HttpLoadResult:
    offered_rps: float
    sent: int
    ok: int
    achieved_rps: float  # answered 200 / (last 200 answer - first scheduled arrival)
    latency_ms: np.ndarray  # of the 200 answers, from each request's scheduled arrival
    errors: dict[str, int]  # status (or timeout / connection) -> count, everything but 200
    wall_s: float
    client_lag_ms_p99: float  # how late requests left the client after their scheduled time

    def percentile(self, q: float) -> float | None:
        return float(np.percentile(self.latency_ms, q)) if len(self.latency_ms) else None

    def errors_text(self) -> str | None:
        return ";".join(f"{k}={v}" for k, v in sorted(self.errors.items())) or None


def offer_load(url: str, bodies: list[tuple[bytes, dict[str, str]]], rate_rps: float, requests: int,
               max_duration_s: float, timeout_s: float = 30.0, connections: int = 256,
               processes: int = 1, seed: int = 0) -> HttpLoadResult:
    """Poisson arrivals at ``rate_rps`` to ``url`` (bounded by ``requests`` and ``max_duration_s``;
    every request by ``timeout_s``), over ``processes`` processes; waits for every answer."""
    start = time.monotonic() + 0.05 + 0.5 * (processes > 1)  # spawned processes need a moment to start
    plans = [LoadPlan(url, rate_rps / processes, max(1, requests // processes), max_duration_s, timeout_s,
                      max(1, connections // processes), seed + i) for i in range(processes)]
    if processes == 1:
        outcomes = _offer_in_process(plans[0], bodies, start)
    else:
        with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn")) as pool:
            parts = [pool.submit(_offer_in_process, plan, bodies, start) for plan in plans]
            outcomes = [item for part in parts for item in part.result()]
    statuses = Counter(status for *_, status in outcomes)
    good = [(s, d) for s, _, d, status in outcomes if status == "200"]
    end = max((d for _, _, d, _ in outcomes), default=start)
    lag = [(sent - s) * 1000.0 for s, sent, _, _ in outcomes]
    last_ok = max((d for _, d in good), default=start)
    return HttpLoadResult(
        offered_rps=rate_rps, sent=len(outcomes), ok=len(good),
        achieved_rps=len(good) / (last_ok - start) if good and last_ok > start else 0.0,
        latency_ms=np.array([(d - s) * 1000.0 for s, d in good]),
        errors={k: v for k, v in statuses.items() if k != "200"}, wall_s=end - start,
        client_lag_ms_p99=float(np.percentile(lag, 99)) if lag else 0.0)


def batch_totals(metrics_text: str) -> tuple[float, float]:
    """(sum, count) of the server's batch-size histogram: the difference of two readings gives the
    mean batch of the requests in between."""
    from prometheus_client.parser import text_string_to_metric_families

    total = count = 0.0
    for family in text_string_to_metric_families(metrics_text):
        if family.name == "cnnbench_batch_size":
            for sample in family.samples:
                if sample.name.endswith("_sum"):
                    total = sample.value
                elif sample.name.endswith("_count"):
                    count = sample.value
    return total, count


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


def load_row(info: dict[str, Any], result: HttpLoadResult, kind: str, mean_batch: float | None) -> dict[str, Any]:
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
