"""Dynamic batching and an open-loop load generator; no framework in here.

:class:`MicroBatcher` sits in front of a model: callers ``submit`` one request each and get a
future; one worker thread flushes a batch when it holds ``max_batch`` requests or when the
*oldest* request has waited ``timeout_ms`` since it arrived, whichever comes first, also when no
further request arrives. Results go back to each caller in the order of the batch, so a request
never receives another's result.

:func:`run_open_loop` offers Poisson arrivals at a fixed rate, bounded in count and in time.
It is open loop: a request is sent at its scheduled time whether or not earlier ones have
finished, and its latency is measured from that scheduled time, so a server that falls behind
shows up as growing latency rather than as a politely slower client (coordinated omission).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

_STOP = object()


@dataclass
class Request:
    payload: np.ndarray
    arrival: float  # time.perf_counter() when the request arrived
    future: Future = field(default_factory=Future)
    done: float = 0.0  # when its result was handed back


class MicroBatcher:
    """Collects single requests into batches for ``handler(stacked_payloads) -> outputs``."""

    def __init__(self, handler: Callable[[np.ndarray], np.ndarray], max_batch: int, timeout_ms: float) -> None:
        if max_batch < 1 or timeout_ms < 0:
            raise ValueError(f"max_batch must be >= 1 and timeout_ms >= 0, found {max_batch}, {timeout_ms}")
        self.handler, self.max_batch, self.timeout_s = handler, max_batch, timeout_ms / 1000.0
        self.batch_sizes: list[int] = []
        self.batch_ms: list[float] = []  # the handler's wall time for each flushed batch
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._serve, name="micro-batcher", daemon=True)
        self._thread.start()

    def submit(self, payload: np.ndarray, arrival: float | None = None) -> Request:
        request = Request(payload, time.perf_counter() if arrival is None else arrival)
        self._queue.put(request)
        return request

    def close(self) -> None:
        """Serve what is queued, then stop the worker."""
        self._queue.put(_STOP)
        self._thread.join()

    def _collect(self, first: Request) -> tuple[list[Request], bool]:
        """A batch that starts with ``first``: until full or until first's deadline passes."""
        batch, deadline, stopping = [first], first.arrival + self.timeout_s, False
        while len(batch) < self.max_batch:
            remaining = deadline - time.perf_counter()
            try:
                # Past the deadline, take only what is already waiting (it has waited too).
                item = self._queue.get(timeout=remaining) if remaining > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if item is _STOP:
                stopping = True
                break
            batch.append(item)
        return batch, stopping

    def _serve(self) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is _STOP:
                return
            batch, stopping = self._collect(first)
            self.batch_sizes.append(len(batch))
            begun = time.perf_counter()
            try:
                outputs = self.handler(np.stack([r.payload for r in batch]))
                self.batch_ms.append((time.perf_counter() - begun) * 1000.0)
                if len(outputs) != len(batch):
                    raise RuntimeError(f"handler returned {len(outputs)} results for {len(batch)} requests")
            except BaseException as exc:  # noqa: BLE001 - every caller must learn of the failure
                for request in batch:
                    request.done = time.perf_counter()
                    request.future.set_exception(exc)
                continue
            now = time.perf_counter()
            for request, output in zip(batch, outputs):
                request.done = now
                request.future.set_result(output)


@dataclass(frozen=True)
class LoadResult:
    offered_rps: float
    requests: int  # completed
    achieved_rps: float  # completed / (last completion - first scheduled arrival)
    latency_ms: np.ndarray  # per request, from its scheduled arrival to its result
    mean_batch: float
    wall_s: float

    def percentile(self, q: float) -> float:
        return float(np.percentile(self.latency_ms, q))


def poisson_arrivals(rate_rps: float, count: int, max_duration_s: float, seed: int = 0) -> np.ndarray:
    """Arrival offsets (s) of a Poisson process at ``rate_rps``: at most ``count``, all before
    ``max_duration_s``."""
    gaps = np.random.default_rng(seed).exponential(1.0 / rate_rps, count)
    times = np.cumsum(gaps) - gaps[0]  # the first request arrives at once
    return times[times < max_duration_s]


def run_open_loop(submit: Callable[[np.ndarray, float], Request], payloads: np.ndarray, rate_rps: float,
                  count: int, max_duration_s: float, seed: int = 0,
                  batch_sizes: Callable[[], list[int]] | None = None) -> LoadResult:
    """Offer ``payloads`` (cycled) at Poisson arrivals; wait for every result."""
    offsets = poisson_arrivals(rate_rps, count, max_duration_s, seed)
    start = time.perf_counter() + 0.01
    sent = []
    for index, offset in enumerate(offsets):
        scheduled = start + offset
        delay = scheduled - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        sent.append(submit(payloads[index % len(payloads)], scheduled))
    for request in sent:
        request.future.result()
    latency = np.array([(r.done - r.arrival) * 1000.0 for r in sent])
    end = max(r.done for r in sent)
    sizes = batch_sizes() if batch_sizes else []
    return LoadResult(offered_rps=rate_rps, requests=len(sent), achieved_rps=len(sent) / (end - start),
                      latency_ms=latency, mean_batch=float(np.mean(sizes)) if sizes else 1.0,
                      wall_s=end - start)
