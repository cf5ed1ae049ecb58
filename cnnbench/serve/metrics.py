"""The Prometheus series of `cnnbench serve`, in a registry of their own (not the process-global one).

In the single-process server every series is this process's. With front-end processes, the batch-size
histogram, the queue depth, the request counters and the engine's time are read from the shared ring's
header (the engine writes the batch figures and its time, each front end its own row of counters), so a
scrape of any front end shows the whole server; the latency histogram stays the answering front end's own.

The engine's time (:func:`engine_time_families`) says where a loaded server's engine side goes: the
batcher's launcher thread in launches (and its own CPU time in them: the rest it waited, for the GIL
mostly) or idle (no request, a batch filling, the device full), and the CPU time of the process that runs
the engine, all its threads. `cnnbench load` turns two readings into per-rate figures.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from cnnbench.infer.batcher import LauncherTimes

LATENCY_BUCKETS = (.001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5, 10)


def batch_size_buckets(max_batch: int) -> list[int]:
    return sorted({2**i for i in range(max_batch.bit_length())} | {max_batch})


class ServerMetrics:
    def __init__(self, max_batch: int, depth: Callable[[], float], shared: Any = None, frontend: int = 0,
                 launcher: Callable[[], LauncherTimes | None] | None = None) -> None:
        """``shared``: the ring (cnnbench.serve.ring.Ring) whose header holds the server-wide figures;
        ``frontend``: this front end's row of counters in it; ``launcher``: without a ring, the batcher's
        launcher times (None until the batcher exists, and with `batching = "none"`)."""
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry, self.shared, self.frontend = CollectorRegistry(), shared, frontend
        self.latency = Histogram("cnnbench_request_latency_seconds", "/v1/infer, request received to answer.",
                                 buckets=LATENCY_BUCKETS, registry=self.registry)
        self.batch_seconds = Histogram("cnnbench_batch_seconds", "A batch's launch to its results on the host.",
                                       buckets=(.001, .002, .005, .01, .02, .05, .1, .2, .5, 1),
                                       registry=self.registry)
        self.disconnects = Counter("cnnbench_client_disconnects", "Clients gone before their body arrived.",
                                   registry=self.registry)
        if shared is None:
            self.requests = Counter("cnnbench_requests", "Answers of /v1/infer and /v2 infer by HTTP status.",
                                    ["status"], registry=self.registry)
            self.batch_size = Histogram("cnnbench_batch_size", "Requests per launched batch.",
                                        buckets=batch_size_buckets(max_batch), registry=self.registry)
            Gauge("cnnbench_queue_depth", "Requests admitted and not yet launched.",
                  registry=self.registry).set_function(depth)
            self.registry.register(_EngineTimesCollector(launcher or (lambda: None)))
        else:
            self.registry.register(_RingCollector(shared))

    def on_batch(self, size: int, seconds: float) -> None:
        self.batch_size.observe(size)
        self.batch_seconds.observe(seconds)

    def count(self, status: int) -> None:
        if self.shared is None:
            self.requests.labels(str(status)).inc()
        else:
            self.shared.count_request(status, self.frontend)

    def text(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


LAUNCHER_STATES = ("launching", "no_request", "filling", "device_full")


def launcher_seconds(times: LauncherTimes) -> dict[str, float]:
    """The launcher's seconds by LAUNCHER_STATES."""
    return {"launching": times.launching_s, "no_request": times.no_request_s, "filling": times.filling_s,
            "device_full": times.device_full_s}


def engine_time_families(times: LauncherTimes | None, process_cpu_s: float) -> Iterator[Any]:
    """The engine's time since the server started (warm-up batches included: counters, read as rates)."""
    from prometheus_client.core import CounterMetricFamily

    yield CounterMetricFamily("cnnbench_engine_process_cpu_seconds",
                              "CPU time of the process that runs the engine, all its threads (with front ends the "
                              "engine process, without them the one server process).", value=process_cpu_s)
    if times is None:  # no batcher (batching none, or still loading)
        return
    launcher = CounterMetricFamily("cnnbench_launcher_seconds", "The batcher's launcher thread: in launches, idle "
                                   "with no request, while a batch filled, with the device full.", labels=["state"])
    for state, seconds in launcher_seconds(times).items():
        launcher.add_metric([state], seconds)
    yield launcher
    yield CounterMetricFamily("cnnbench_launcher_cpu_seconds", "The launcher thread's own CPU time inside launches "
                              "(the rest of its launching seconds it waited: for the GIL, mostly).",
                              value=times.launching_cpu_s)
    yield CounterMetricFamily("cnnbench_launches", "Batches launched.", value=times.launches)


class _EngineTimesCollector:
    """The engine's time in the one-process server: this process's CPU and its batcher's launcher."""

    def __init__(self, launcher: Callable[[], LauncherTimes | None]) -> None:
        self.launcher = launcher

    def collect(self) -> Any:
        yield from engine_time_families(self.launcher(), time.process_time())


class _RingCollector:
    """The server-wide series, read from the ring's header at each scrape."""

    def __init__(self, ring: Any) -> None:
        self.ring = ring

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        counts, total, buckets = self.ring.batch_histogram()
        cumulative, running = [], 0
        for bound, count in zip(self.ring.batch_buckets, counts):
            running += count
            cumulative.append((str(float(bound)), running))
        cumulative.append(("+Inf", int(sum(counts))))
        yield HistogramMetricFamily("cnnbench_batch_size", "Requests per launched batch.", buckets=cumulative,
                                    sum_value=total)
        yield GaugeMetricFamily("cnnbench_queue_depth", "Requests admitted and not yet launched.",
                                value=self.ring.queue_depth())
        requests = CounterMetricFamily("cnnbench_requests", "Answers of /v1/infer and /v2 infer by HTTP status.",
                                       labels=["status"])
        for status, count in self.ring.request_counts().items():
            requests.add_metric([str(status)], count)
        yield requests
        yield from engine_time_families(*self.ring.engine_times())
