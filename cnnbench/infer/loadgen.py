"""`cnnbench load URL`: open-loop Poisson load over real HTTP (asyncio streams), loopback only.

Each request is queued at its scheduled time whether or not earlier ones have been answered, and its
latency runs from that scheduled time to its answer (no coordinated omission: a server that falls
behind, or a client whose connections are all busy, shows as latency, not as a politely slower
client). ``connections`` persistent HTTP/1.1 connections, opened before the clock starts, each take
the next request from the queue and send it: a body's request bytes are built once, so a request costs
one write and the parse of a small answer. httpx is not used for the load: its per-request cost made
the client the bound (measured: one process topped out near 400 requests/s of 150 KB bodies on two
cores, and lagged 191 ms p99 at 100 requests/s over six processes on a 16-core host); it still serves
the few requests of /healthz, /v1/info and /metrics. ``processes`` > 1 splits the rate over several
processes (the sum of independent Poisson processes is a Poisson process of the summed rate) that
start together, once all have their connections open, on the same clock (``time.monotonic`` is
system-wide on Linux). The server's ``/metrics`` read before and after give the mean batch size of the
requests of this load.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import multiprocessing
import queue
import socket
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
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


class _ProtocolError(Exception):
    """An answer this client cannot read as HTTP/1.x."""


class _Unanswered(ConnectionError):
    """The server closed (or reset) the connection before the first byte of its answer."""


def _prebuilt_requests(url: str, bodies: list[tuple[bytes, dict[str, str]]]) -> list[bytes]:
    """Each body as the complete bytes of its POST (head and body), built once: sending a request is
    then one write of bytes that already exist."""
    parsed = urllib.parse.urlsplit(url)
    target = (parsed.path or "/") + (f"?{parsed.query}" if parsed.query else "")
    requests = []
    for body, headers in bodies:
        lines = [f"POST {target} HTTP/1.1", f"Host: {parsed.netloc}", f"Content-Length: {len(body)}"]
        lines += [f"{name}: {value}" for name, value in headers.items()
                  if name.lower() not in ("host", "content-length", "connection")]
        requests.append(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
    return requests


async def _skip_chunked(reader: asyncio.StreamReader) -> None:
    """Read past a chunked body and its trailers."""
    while size := int(((await reader.readuntil(b"\r\n")).split(b";", 1)[0]), 16):
        await reader.readexactly(size + 2)  # the chunk and its CRLF
    while await reader.readuntil(b"\r\n") != b"\r\n":
        pass


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bool]:
    """(status, whether the connection stays open) of one answer, its body read and dropped."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            raise _Unanswered("closed before answering") from None
        raise
    except ConnectionResetError as exc:  # a server that closes with our request unread resets
        raise _Unanswered(str(exc)) from None
    status_line, *lines = head[:-4].decode("latin-1").split("\r\n")
    version, code, *_ = status_line.split(" ", 2)
    if not version.startswith("HTTP/1.") or not code.isdigit():
        raise _ProtocolError(status_line)
    fields = {}
    for line in lines:
        name, _, value = line.partition(":")
        fields[name.strip().lower()] = value.strip().lower()
    status = int(code)
    # HTTP/1.1 stays open unless the server says close; HTTP/1.0 closes unless it says keep-alive
    keep = fields.get("connection", "keep-alive" if version == "HTTP/1.1" else "close") != "close"
    if "chunked" in fields.get("transfer-encoding", ""):
        await _skip_chunked(reader)
    elif "content-length" in fields:
        await reader.readexactly(int(fields["content-length"]))
    elif not (100 <= status < 200 or status in (204, 304)):  # a body that runs to the end of the connection
        await reader.read()
        keep = False
    return status, keep


class _Connection:
    """One persistent HTTP/1.1 connection, reopened after anything that leaves it unusable."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    def drop(self) -> None:
        """Abort (not close) the socket: after a timeout or error, nothing on it is worth flushing."""
        if self.writer is not None:
            self.writer.transport.abort()
        self.reader = self.writer = None

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()
        self.reader = self.writer = None

    async def post(self, request: bytes) -> int:
        """Send ``request``, read its answer; the status."""
        if self.reader is not None and self.reader.at_eof():
            self.drop()  # the server closed it while it was idle (uvicorn's keep-alive timeout is 5 s)
        reused = self.writer is not None
        if not reused:
            await self.open()
        try:
            return await self._exchange(request)
        except _Unanswered:
            if not reused:
                raise
            # The server closed this idle connection as the request went out (the keep-alive race
            # every HTTP client meets): it never saw the request; send it once more on a fresh one.
            self.drop()
            await self.open()
            return await self._exchange(request)

    async def _exchange(self, request: bytes) -> int:
        assert self.reader is not None and self.writer is not None
        try:
            self.writer.write(request)
            await self.writer.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise _Unanswered(str(exc)) from None
        status, keep = await _read_response(self.reader)
        if not keep:
            self.drop()  # the server said Connection: close; the next request opens a new one
        return status


Outcome = tuple[float, float, float, str]  # (scheduled, sent, done, status) of one request


async def _answer(connection: _Connection, request: bytes, timeout_s: float) -> str:
    """The status of one request as a string, or timeout / connection / protocol; a connection left
    in an unknown state (part of an answer unread) is dropped, to be reopened by the next request."""
    try:
        async with asyncio.timeout(timeout_s):
            return str(await connection.post(request))
    except TimeoutError:  # before OSError, of which it is a subclass
        connection.drop()
        return "timeout"
    except (OSError, EOFError):  # refused, reset, or the end of the stream mid-answer
        connection.drop()
        return "connection"
    except (_ProtocolError, ValueError, asyncio.LimitOverrunError):
        connection.drop()
        return "protocol"


async def _serve_jobs(connection: _Connection, jobs: asyncio.Queue, requests: list[bytes], timeout_s: float,
                      outcomes: list[Outcome | None]) -> None:
    """One connection's loop: the next job from the queue, sent and answered, until the end mark."""
    while (job := await jobs.get()) is not None:
        index, scheduled = job
        sent = time.monotonic()  # later than scheduled when every connection is busy: it counts in the latency
        status = await _answer(connection, requests[index % len(requests)], timeout_s)
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


async def _open_all(connections: list[_Connection]) -> None:
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
    requests = _prebuilt_requests(plan.url, bodies)
    offsets = poisson_arrivals(plan.rate_rps, plan.requests, plan.max_duration_s, plan.seed)
    connections = [_Connection(parsed.hostname or "127.0.0.1", parsed.port or 80) for _ in range(plan.connections)]
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


def offer_load(url: str, bodies: list[tuple[bytes, dict[str, str]]], rate_rps: float, requests: int,
               max_duration_s: float, timeout_s: float = 30.0, connections: int = 256,
               processes: int = 1, seed: int = 0) -> HttpLoadResult:
    """Poisson arrivals at ``rate_rps`` to ``url`` (bounded by ``requests`` and ``max_duration_s``;
    every request by ``timeout_s``), over ``processes`` processes; waits for every answer."""
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
