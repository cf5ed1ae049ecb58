"""The micro-batcher and the open-loop load generator (framework-free: the handler is numpy)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from cnnbench.infer.serving import MicroBatcher, poisson_arrivals, run_open_loop


def _doubling(compute_s: float = 0.0):
    def handler(batch: np.ndarray) -> np.ndarray:
        if compute_s:
            time.sleep(compute_s)
        return batch * 2.0

    return handler


def test_flushes_when_the_batch_is_full_without_waiting_for_the_deadline():
    batcher = MicroBatcher(_doubling(), max_batch=4, timeout_ms=10_000)
    begun = time.perf_counter()
    requests = [batcher.submit(np.array([float(i)])) for i in range(8)]
    results = [r.future.result(timeout=5) for r in requests]
    batcher.close()
    assert time.perf_counter() - begun < 2.0  # far below the 10 s deadline
    assert batcher.batch_sizes == [4, 4]
    assert [float(x[0]) for x in results] == [2.0 * i for i in range(8)]


def test_flushes_at_the_deadline_when_no_further_request_comes():
    batcher = MicroBatcher(_doubling(), max_batch=64, timeout_ms=50)
    requests = [batcher.submit(np.array([1.0])) for _ in range(3)]
    for r in requests:
        r.future.result(timeout=5)
    waited = [(r.done - r.arrival) * 1000 for r in requests]
    batcher.close()
    assert batcher.batch_sizes == [3]
    # the oldest request waited its deadline (measured from its arrival), not much more
    assert 45 <= waited[0] <= 50 + 40


def test_never_loses_or_mixes_up_results_under_concurrent_callers():
    batcher = MicroBatcher(_doubling(0.002), max_batch=8, timeout_ms=3)
    got: dict[int, float] = {}

    def caller(start: int) -> None:
        for i in range(start, start + 50):
            got[i] = float(batcher.submit(np.array([float(i)])).future.result(timeout=10)[0])

    threads = [threading.Thread(target=caller, args=(k * 50,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    batcher.close()
    assert got == {i: 2.0 * i for i in range(200)}
    assert sum(batcher.batch_sizes) == 200 and max(batcher.batch_sizes) > 1  # batching happened


def test_a_failing_handler_fails_every_request_of_the_batch():
    def broken(batch):
        raise ValueError("model exploded")

    batcher = MicroBatcher(broken, max_batch=2, timeout_ms=1)
    requests = [batcher.submit(np.zeros(1)) for _ in range(2)]
    for r in requests:
        with pytest.raises(ValueError, match="model exploded"):
            r.future.result(timeout=5)
    batcher.close()


def test_low_load_p99_stays_within_timeout_plus_one_batch_of_compute():
    timeout_ms, compute_ms = 20.0, 5.0
    batcher = MicroBatcher(_doubling(compute_ms / 1000), max_batch=8, timeout_ms=timeout_ms)
    load = run_open_loop(batcher.submit, np.zeros((4, 1)), rate_rps=20, count=60, max_duration_s=10,
                         batch_sizes=lambda: batcher.batch_sizes)
    batcher.close()
    assert load.requests == 60
    # thread wake-ups on a loaded 2-core machine cost a few ms; nothing may wait a second deadline
    assert load.percentile(99) <= timeout_ms + compute_ms + 5.0, load.latency_ms.max()
    assert load.achieved_rps == pytest.approx(20, rel=0.5)


def test_poisson_arrivals_are_bounded_and_have_the_rate():
    times = poisson_arrivals(100.0, 20_000, 1e9, seed=3)
    assert len(times) == 20_000 and np.all(np.diff(times) >= 0)
    assert 1 / np.mean(np.diff(times)) == pytest.approx(100.0, rel=0.03)
    assert poisson_arrivals(100.0, 20_000, 2.0).max() < 2.0
