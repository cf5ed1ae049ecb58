"""The Prometheus series of `cnnbench serve`, in a registry of their own (not the process-global one).

In the single-process server every series is this process's. With front-end processes, the batch-size
histogram, the queue depth and the request counters are read from the shared ring's header (the engine
writes the batch figures, each front end its own row of counters), so a scrape of any front end shows
the whole server; the latency histogram stays the answering front end's own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

LATENCY_BUCKETS = (.001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5, 10)


def batch_size_buckets(max_batch: int) -> list[int]:
    return sorted({2**i for i in range(max_batch.bit_length())} | {max_batch})


class ServerMetrics:
    def __init__(self, max_batch: int, depth: Callable[[], float], shared: Any = None, frontend: int = 0) -> None:
        """``shared``: the ring (cnnbench.serve.ring.Ring) whose header holds the server-wide figures;
        ``frontend``: this front end's row of counters in it."""
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
