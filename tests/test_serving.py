"""The micro-batcher and the open-loop load generator (framework-free: the handler is numpy)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from numpy_serve_engine import SHAPE, NumpyEngine, expected_answer

from cnnbench.infer.batcher import PipelinedBatcher, QueueFull, batch_shapes, copy_threads_for, padded_size
from cnnbench.infer.micro_batcher import MicroBatcher, poisson_arrivals, run_open_loop


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
    timeout_ms, compute_ms = 50.0, 5.0
    batcher = MicroBatcher(_doubling(compute_ms / 1000), max_batch=8, timeout_ms=timeout_ms)
    load = run_open_loop(batcher.submit, np.zeros((4, 1)), rate_rps=20, count=60, max_duration_s=10,
                         batch_sizes=lambda: batcher.batch_sizes)
    batcher.close()
    assert load.requests == 60
    # nothing may wait a second deadline (>= 2 x 50 + 5 ms); thread wake-ups on a loaded 2-core machine
    # (servers under test beside it) have cost up to 16 ms, so they get half a deadline
    assert load.percentile(99) <= 1.5 * timeout_ms + compute_ms, load.latency_ms.max()
    assert load.achieved_rps == pytest.approx(20, rel=0.5)


def test_poisson_arrivals_are_bounded_and_have_the_rate():
    times = poisson_arrivals(100.0, 20_000, 1e9, seed=3)
    assert len(times) == 20_000 and np.all(np.diff(times) >= 0)
    assert 1 / np.mean(np.diff(times)) == pytest.approx(100.0, rel=0.03)
    assert poisson_arrivals(100.0, 20_000, 2.0).max() < 2.0


# -- the pipelined batcher of `cnnbench serve` -------------------------------------------------------


def _image(value: int) -> np.ndarray:
    image = np.zeros(SHAPE, np.uint8)
    image.flat[0] = value
    return image


def test_pipelined_batcher_launches_the_next_batch_while_the_previous_one_computes():
    engine = NumpyEngine(compute_ms=100)
    batcher = PipelinedBatcher(engine, max_batch=4, deadline_ms=10_000, max_queue=64)
    futures = [batcher.submit(_image(i)) for i in range(12)]
    answers = [f.result(timeout=10)[0].tolist() for f in futures]
    batcher.close()
    assert answers == [expected_answer(_image(i)) for i in range(12)]
    assert [valid for _, _, valid in engine.launches] == [4, 4, 4]  # full batches, no deadline wait
    (l0, r0, _), (l1, _, _), (l2, _, _) = engine.launches
    assert l1 < r0  # batch 1 was handed to the device before batch 0's results were back
    assert l2 >= r0 - 0.02  # two in flight at most: batch 2 waited for batch 0


def test_pipelined_batcher_flushes_at_the_oldest_requests_deadline():
    engine = NumpyEngine(compute_ms=1)
    batcher = PipelinedBatcher(engine, max_batch=64, deadline_ms=60, max_queue=64)
    begun = time.perf_counter()
    futures = [batcher.submit(_image(i)) for i in range(3)]
    for f in futures:
        f.result(timeout=5)
    waited = (time.perf_counter() - begun) * 1000
    batcher.close()
    assert [valid for _, _, valid in engine.launches] == [3]
    assert 55 <= waited <= 60 + 200


def test_pipelined_batcher_refuses_past_max_queue_and_close_answers_everything_admitted():
    engine = NumpyEngine(compute_ms=50)
    batcher = PipelinedBatcher(engine, max_batch=2, deadline_ms=10_000, max_queue=3, in_flight=1)
    admitted, refused = [], 0
    for i in range(12):
        try:
            admitted.append((i, batcher.submit(_image(i))))
        except QueueFull:
            refused += 1
    batcher.close()  # launches the partial batch at once, answers all
    assert refused > 0 and len(admitted) + refused == 12
    assert all(f.result(timeout=5)[0].tolist() == expected_answer(_image(i)) for i, f in admitted)


def test_padded_batch_sizes():
    assert [padded_size(n, 8, 32) for n in (1, 8, 9, 31, 32)] == [8, 8, 16, 32, 32]
    assert batch_shapes(32, 8) == [8, 16, 24, 32] and batch_shapes(5, 1) == [1, 2, 3, 4, 5]


def test_cuda_graphs_are_a_torch_gpu_serving_option_stamped_on_its_rows(tmp_path):
    from conftest import REPO, write_spec

    from cnnbench.infer.plan import serve_run
    from cnnbench.spec import load_spec

    text = (REPO / "experiments" / "resnet50_serve.toml").read_text()
    assert not serve_run(load_spec(write_spec(tmp_path, text)), "torch", "gpu")[1].cuda_graphs  # opt-in
    spec = load_spec(write_spec(tmp_path, text.replace("channels_last = true", "channels_last = true\n"
                                                       "serve_cuda_graphs = true"), "graphs.toml"))
    variant = serve_run(spec, "torch", "gpu")[1]
    assert variant.cuda_graphs and variant.options_text().endswith(";cuda_graphs=True")
    for backend, kind in (("torch", "cpu"), ("jax", "gpu")):  # no CUDA graph to capture
        variant = serve_run(spec, backend, kind)[1]
        assert not variant.cuda_graphs and "cuda_graphs" not in variant.options_text()


class _FrameEngine:
    """A framework-free engine of 1080p frames whose answer is each image's checksum: a copy that drops,
    repeats or mixes up a band of rows shows in the answer."""

    image_shape = (1080, 1920, 3)
    pad_multiple = 1

    def staging_buffers(self, count: int, max_batch: int) -> list[np.ndarray]:
        self._host = [np.zeros((max_batch, *self.image_shape), np.uint8) for _ in range(count)]
        return self._host

    def launch(self, index: int, valid: int):
        return _checksums(self._host[index][:valid])

    def collect(self, handle):
        return handle, np.zeros(handle.shape, np.float32)


def _checksums(images: np.ndarray) -> np.ndarray:
    weights = np.arange(1, images[0].size + 1, dtype=np.uint64)  # position-weighted: a moved band changes it
    return np.array([int((image.reshape(-1).astype(np.uint64) * weights).sum()) for image in images])


def test_large_images_are_copied_in_bands_by_several_threads_exactly():
    assert copy_threads_for((1080, 1920, 3)) == 4 and copy_threads_for((224, 224, 3)) == 1
    assert copy_threads_for((224, 224, 3), requested=2) == 2
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, _FrameEngine.image_shape, dtype=np.uint8) for _ in range(6)]
    batcher = PipelinedBatcher(_FrameEngine(), max_batch=4, deadline_ms=5, max_queue=16, copy_threads=4)
    futures = [batcher.submit(frame) for frame in frames]
    bad = batcher.submit(np.zeros((1080, 1920, 2), np.uint8))  # a wrong shape fails this request only
    copiers = [t for t in threading.enumerate() if t.name.startswith("batch-copy")]
    answers = [int(f.result(timeout=30)[0]) for f in futures]
    with pytest.raises(ValueError):
        bad.result(timeout=30)
    batcher.close()
    assert answers == [int(c) for c in _checksums(np.stack(frames))]
    assert 0 < len(copiers) <= 3  # the caller copies one band, at most three pool threads the others
    assert not [t for t in threading.enumerate() if t.name.startswith("batch-copy")]  # close stops them


class _Places:
    """What answers.admitted asks of a service (a front end's free ring slots, or the queue's room): why one
    more request beside those being decoded cannot be taken, or None."""

    def __init__(self, places: int | None) -> None:
        self.places, self.admitting = places, 0

    def refusal(self, decoding: int) -> str | None:
        if self.places is None or decoding < self.places:
            return None
        return f"{decoding} requests are being decoded ({self.places} places)"


def test_a_full_server_refuses_before_decoding_and_a_decoded_request_keeps_its_place():
    from cnnbench.serve.answers import admitted

    service = _Places(2)
    with admitted(service), admitted(service):  # two bodies being decoded take the two places
        assert service.admitting == 2
        with pytest.raises(QueueFull, match="2 requests are being decoded"), admitted(service):
            pass  # the third is refused before any decode
    assert service.admitting == 0  # decoded (or failed to): the places are given back
    with pytest.raises(ValueError), admitted(service):
        raise ValueError("a corrupt body")
    assert service.admitting == 0
    unlimited = _Places(None)  # the plain route: no queue to fill
    with admitted(unlimited), admitted(unlimited), admitted(unlimited):
        assert unlimited.admitting == 3


class _HostHalvesEngine:
    """4 ms of host work to launch and 4 ms to collect (sleeps: the GIL is free, as in a framework's C++), no
    device time: launch and collect overlap only when two threads run them."""

    image_shape, pad_multiple = (8, 8, 3), 8

    def staging_buffers(self, count: int, max_batch: int) -> list[np.ndarray]:
        return [np.zeros((max_batch, *self.image_shape), np.uint8) for _ in range(count)]

    def launch(self, index: int, valid: int):
        time.sleep(0.004)
        return valid

    def collect(self, valid: int):
        time.sleep(0.004)
        return np.zeros((valid, 5), np.int64), np.zeros((valid, 5), np.float32)


class _SpinningLaunchEngine(_HostHalvesEngine):
    """A launch that is 4 ms of the launching thread's own work (a spin on its CPU clock), as an eager
    framework's Python is; collect sleeps."""

    def launch(self, index: int, valid: int):
        until = time.thread_time() + 0.004
        while time.thread_time() < until:
            pass
        return valid


def test_the_engine_alone_is_measured_as_the_batcher_drives_it_so_it_is_the_batchers_ceiling():
    # one thread launching and collecting would take 8 ms a batch (4 img/ms at 32), the batcher 4 ms
    import sys

    from conftest import REPO
    sys.path.insert(0, str(REPO / "benchmarks"))
    from serve_pipeline import batcher_rate, engine_rate

    engine = _HostHalvesEngine()
    alone, batch_ms = engine_rate(engine, engine.staging_buffers(3, 32), 32, windows=3, steps=20)
    batched = batcher_rate(_HostHalvesEngine(), 32, 5.0, 60 * 32)
    assert batch_ms >= 8.0
    assert alone > 1.5 * 32 / 8.0 * 1000  # above the one-thread rate of 4,000 img/s
    assert batched < 1.1 * alone


def test_the_launcher_says_whether_it_launched_waited_for_requests_or_waited_for_the_device():
    import sys

    from conftest import REPO
    sys.path.insert(0, str(REPO / "benchmarks"))
    from serve_pipeline import batcher_rate, launch_ms

    engine = _HostHalvesEngine()  # 4 ms of host time per launch, 4 ms per collect, asleep: no CPU time
    wall_ms, cpu_ms = launch_ms(engine, engine.staging_buffers(3, 32), 32, steps=10)
    assert 3.5 <= wall_ms < 8 and cpu_ms < 0.25 * wall_ms
    launcher: dict[str, float] = {}
    batcher_rate(_HostHalvesEngine(), 32, 5.0, 20 * 32, launcher)
    assert 3.5 <= launcher["batcher_launch_ms"] < 8
    assert launcher["batcher_launch_cpu_ms"] < 0.25 * launcher["batcher_launch_ms"]
    # one thread submitting as fast as it can never leaves the launcher without a request for long
    assert launcher["idle_no_request"] < 0.5

    spinning = _SpinningLaunchEngine()  # 4 ms of the launching thread's own CPU per launch (its wall time
    wall_ms, cpu_ms = launch_ms(spinning, spinning.staging_buffers(3, 32), 32, steps=10)  # grows on a busy host)
    assert 3.5 <= cpu_ms <= wall_ms + 0.1
    launcher = {}
    batcher_rate(_SpinningLaunchEngine(), 32, 5.0, 10 * 32, launcher)
    assert launcher["batcher_launch_cpu_ms"] > 3.0

    engine = NumpyEngine(compute_ms=100)  # the device is the bound: batches wait for a place in flight
    batcher = PipelinedBatcher(engine, max_batch=4, deadline_ms=10_000, max_queue=64, in_flight=1)
    time.sleep(0.1)  # nothing submitted yet
    futures = [batcher.submit(_image(i)) for i in range(12)]
    for future in futures:
        future.result(timeout=10)
    batcher.close()
    times = batcher.launcher_times
    assert times.launches == 3
    assert times.no_request_s >= 0.09
    assert times.device_full_s >= 0.15  # batches 1 and 2 each waited ~100 ms for the one before
    assert times.filling_s < 0.05  # every batch was full at once: no deadline wait


class _SlowFirstCopy(PipelinedBatcher):
    """The first request's copy into its slot takes 0.3 s, as a large frame's can."""

    def _copy(self, target: np.ndarray, image: np.ndarray) -> None:
        if image[0, 0, 0] == 1:
            time.sleep(0.3)
        super()._copy(target, image)


def test_a_batch_taken_while_a_copy_is_in_progress_launches_when_the_copy_ends():
    # the last copy of a batch the launcher has taken is the one wake-up a copy gives: nothing else wakes it
    batcher = _SlowFirstCopy(NumpyEngine(compute_ms=1), max_batch=2, deadline_ms=10_000, max_queue=8)
    try:
        futures: list = []
        slow = threading.Thread(target=lambda: futures.append(batcher.submit(_image(1))))
        slow.start()
        time.sleep(0.05)  # the first request is in its slow copy
        second = batcher.submit(_image(2))  # fills the batch: the launcher takes it and waits for the copy
        slow.join(timeout=5)
        assert [f.result(timeout=5)[0].tolist() for f in (*futures, second)] == [expected_answer(_image(1)),
                                                                                  expected_answer(_image(2))]
        assert batcher.launcher_times.launches == 1
    finally:
        batcher.close()
