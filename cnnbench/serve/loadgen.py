"""`cnnbench load`'s load: open-loop Poisson arrivals over real HTTP, one or several client processes.

Each request is queued at its scheduled time whether or not earlier ones have been answered, and its
latency runs from that scheduled time to its answer (no coordinated omission: a server that falls
behind, or a client whose connections are all busy, shows as latency, not as a politely slower
client). ``connections`` persistent HTTP/1.1 connections (cnnbench.serve.http_client), opened before
the clock starts, each take the next request from the queue and send it. ``processes`` > 1 splits the
rate over several processes (the sum of independent Poisson processes is a Poisson process of the
summed rate) that start together, once all have their connections open, on the same clock
(``time.monotonic`` is system-wide on Linux). At a rate far above what the server answers every
connection is always busy: the load is then closed-loop with ``connections`` in flight, as wrk's is.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import queue
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from cnnbench.infer.micro_batcher import poisson_arrivals
from cnnbench.serve.http_client import Connection, answer, prebuilt_requests

INPUTS = ("raw", "jpeg", "png")


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


Outcome = tuple[float, float, float, str]  # (scheduled, sent, done, status) of one request


async def _serve_jobs(connection: Connection, jobs: asyncio.Queue, requests: list[bytes], timeout_s: float,
                      outcomes: list[Outcome | None]) -> None:
    """One connection's loop: the next job from the queue, sent and answered, until the end mark."""
    while (job := await jobs.get()) is not None:
        index, scheduled = job
        sent = time.monotonic()  # later than scheduled when every connection is busy: it counts in the latency
        status = await answer(connection, requests[index % len(requests)], timeout_s)
        outcomes[index] = (scheduled, sent, time.monotonic(), status)
    await connection.close()


async def _schedule(offsets: np.ndarray, start: float, jobs: asyncio.Queue, workers: int) -> None:
    """Queue each job at its Poisson arrival time, whether or not earlier ones have been answered."""
    for index, offset in enumerate(offsets.tolist()):
        scheduled = start + offset
        # a loop, not one sleep: uvloop's timers (libuv's, in whole ms) can wake up to a ms early
        while (delay := scheduled - time.monotonic()) > 0:
            await asyncio.sleep(delay)
        jobs.put_nowait((index, scheduled))
    for _ in range(workers):
        jobs.put_nowait(None)


async def _open_all(connections: list[Connection]) -> None:
    """Open every connection before the clock starts (connect time is not the load's); one that cannot
    be opened now is opened, or fails, with its first request."""
    opened = await asyncio.gather(*(c.open() for c in connections), return_exceptions=True)
    for connection, result in zip(connections, opened):
        if isinstance(result, Exception):
            connection.drop()


async def _offer(plan: LoadPlan, bodies: list[tuple[bytes, dict[str, str]]],
                 start_clock: Callable[[], float]) -> tuple[float, list[Outcome]]:
    """(the start, the outcomes of every request) of one process's share of the load. ``start_clock``
    is called once the connections are open: it blocks until every process is ready and gives the start."""
    parsed = urllib.parse.urlsplit(plan.url)
    requests = prebuilt_requests(plan.url, bodies)
    offsets = poisson_arrivals(plan.rate_rps, plan.requests, plan.max_duration_s, plan.seed)
    connections = [Connection(parsed.hostname or "127.0.0.1", parsed.port or 80) for _ in range(plan.connections)]
    await _open_all(connections)
    start = start_clock()
    jobs: asyncio.Queue = asyncio.Queue()
    outcomes: list[Outcome | None] = [None] * len(offsets)
    workers = [asyncio.create_task(_serve_jobs(c, jobs, requests, plan.timeout_s, outcomes)) for c in connections]
    await _schedule(offsets, start, jobs, len(workers))
    await asyncio.gather(*workers)
    return start, [outcome for outcome in outcomes if outcome is not None]


def _offer_in_process(plan: LoadPlan, bodies: list[tuple[bytes, dict[str, str]]],
                      rendezvous: tuple[Any, Any] | None = None) -> tuple[float, list[Outcome]]:
    """One process's share of the load on its own event loop (uvloop where installed). ``rendezvous``
    (ready, starts), two manager queues: say ready once the connections are open, take the start."""
    def start_clock() -> float:
        if rendezvous is None:
            return time.monotonic() + 0.05
        ready, starts = rendezvous
        ready.put(None)
        start = starts.get()
        if start is None:
            raise RuntimeError("load: another client process failed before the start")
        return start

    try:
        import uvloop

        run = uvloop.run
    except ImportError:
        run = asyncio.run
    return run(_offer(plan, bodies, start_clock))


def _common_start(ready: Any, starts: Any, parts: list[Future]) -> float:
    """Wait until every process has started, imported and opened its connections, then give all of
    them one start a moment ahead (time.monotonic is system-wide on Linux). A fixed start taken before
    spawning had processes slower to start send their first requests late: client lag at low rates."""
    waiting = len(parts)
    try:
        while waiting:
            try:
                ready.get(timeout=0.5)
                waiting -= 1
            except queue.Empty:
                for part in parts:
                    if part.done():
                        part.result()  # a process that failed before it was ready: its error, now
    except BaseException:
        for _ in parts:
            starts.put(None)  # release the ready ones, which would otherwise wait for ever
        raise
    start = time.monotonic() + 0.05  # time for every process to read it off the queue
    for _ in parts:
        starts.put(start)
    return start


def _offer_in_processes(plans: list[LoadPlan],
                        bodies: list[tuple[bytes, dict[str, str]]]) -> tuple[float, list[Outcome]]:
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, ProcessPoolExecutor(len(plans), mp_context=context) as pool:
        ready, starts = manager.Queue(), manager.Queue()
        parts = [pool.submit(_offer_in_process, plan, bodies, (ready, starts)) for plan in plans]
        start = _common_start(ready, starts, parts)
        return start, [outcome for part in parts for outcome in part.result()[1]]


@dataclass(frozen=True)
class HttpLoadResult:
    offered_rps: float
    sent: int
    ok: int
    achieved_rps: float  # answered 200 / (last 200 answer - first scheduled arrival)
    latency_ms: np.ndarray  # of the 200 answers, from each request's scheduled arrival
    errors: dict[str, int]  # status (or timeout / connection / protocol) -> count, everything but 200
    wall_s: float
    client_lag_ms_p99: float  # how late requests left the client after their scheduled time

    def percentile(self, q: float) -> float | None:
        return float(np.percentile(self.latency_ms, q)) if len(self.latency_ms) else None

    def errors_text(self) -> str | None:
        return ";".join(f"{k}={v}" for k, v in sorted(self.errors.items())) or None


# What one client process offers without becoming the bound: 2,006 answered/s at 2,000 offered on a
# 2-core host against the no-model server (benchmarks/load_client.py); above it, add processes.
RATE_PER_PROCESS = 2000.0


def default_processes(rate_rps: float, cores: int | None = None) -> int:
    """Client processes for ``rate_rps``: one per RATE_PER_PROCESS offered, at most half the host's cores
    (on loopback the server needs the other half)."""
    cores = cores or os.cpu_count() or 1
    return max(1, min(-(-int(rate_rps) // int(RATE_PER_PROCESS)), cores // 2))


def offer_load(url: str, bodies: list[tuple[bytes, dict[str, str]]], rate_rps: float, requests: int,
               max_duration_s: float, timeout_s: float = 30.0, connections: int = 256,
               processes: int = 1, seed: int = 0) -> HttpLoadResult:
    """Poisson arrivals at ``rate_rps`` to ``url`` (bounded by ``requests`` and ``max_duration_s``;
    every request by ``timeout_s``), over ``processes`` processes (0: default_processes); waits for
    every answer."""
    processes = processes or default_processes(rate_rps)
    plans = [LoadPlan(url, rate_rps / processes, max(1, requests // processes), max_duration_s, timeout_s,
                      max(1, connections // processes), seed + i) for i in range(processes)]
    if processes == 1:
        start, outcomes = _offer_in_process(plans[0], bodies)
    else:
        start, outcomes = _offer_in_processes(plans, bodies)
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


