"""Reference numbers for `cnnbench serve`, without HTTP (the serving section of `benchmarks/gpu.py`).

``measure SPEC BACKEND DEVICE OUT.jsonl``: builds the server's own engine (uint8 staging buffers, pinned
on a GPU; the copy stream or async device_put) and appends one JSON line with
- ``engine_img_s``: the engine alone at ``max_batch``, two batches in flight, back to back (the model's
  own throughput with uint8 pinned input at the server's batch size);
- ``batch_ms``: one batch of ``max_batch`` alone, launch to top-k on the host (one batch's compute);
- ``batcher_img_s``: the pipelined batcher in process, images submitted one by one as fast as one
  thread can;
- ``decode_per_s_1`` / ``decode_per_s_workers``: JPEG decode + resize to the model's size of a
  ``SOURCE`` picture (default 500x375, ImageNet's typical size), one thread and ``decode_workers``
  threads.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np


def engine_rate(engine, buffers, max_batch: int, windows: int = 5, steps: int = 20) -> tuple[float, float]:
    """(images/s of batches launched back to back, two in flight; ms of one batch alone)."""
    for index in range(len(buffers)):  # warm every buffer once
        engine.collect(engine.launch(index, max_batch))
    alone = []
    for _ in range(10):
        begun = time.perf_counter()
        engine.collect(engine.launch(0, max_batch))
        alone.append((time.perf_counter() - begun) * 1000)
    rates = []
    for _ in range(windows):
        in_flight: collections.deque = collections.deque()
        begun = time.perf_counter()
        for step in range(steps):
            in_flight.append(engine.launch(step % len(buffers), max_batch))
            if len(in_flight) == 2:
                engine.collect(in_flight.popleft())
        while in_flight:
            engine.collect(in_flight.popleft())
        rates.append(steps * max_batch / (time.perf_counter() - begun))
    return float(np.median(rates)), float(np.median(alone))


def batcher_rate(engine, max_batch: int, deadline_ms: float, count: int) -> float:
    """Images/s through the pipelined batcher, submitted one by one from one thread."""
    from cnnbench.infer.batcher import PipelinedBatcher, QueueFull, batch_shapes

    batcher = PipelinedBatcher(engine, max_batch, deadline_ms, max_queue=4 * max_batch)
    image = np.random.default_rng(0).integers(0, 256, engine.image_shape, dtype=np.uint8)
    for size in batch_shapes(max_batch, engine.pad_multiple):  # every shape, in the batcher's threads
        for future in [batcher.submit(image) for _ in range(size)]:
            future.result()
    futures: collections.deque = collections.deque()
    begun = time.perf_counter()
    sent = 0
    while sent < count:
        try:
            futures.append(batcher.submit(image))
            sent += 1
        except QueueFull:  # the device is behind: wait for the oldest answer, as a client would
            futures.popleft().result()
    for future in futures:
        future.result()
    rate = count / (time.perf_counter() - begun)
    batcher.close()
    return rate


def _decode_rates(shape: tuple[int, int, int], source: tuple[int, int], workers: int) -> dict[str, float]:
    from cnnbench.infer.images import decode_image
    from cnnbench.infer.loadgen import request_bodies

    bodies = [body for body, _ in request_bodies("jpeg", shape, source, count=8)]

    def decode_for(seconds: float) -> int:
        done, end = 0, time.perf_counter() + seconds
        while time.perf_counter() < end:
            decode_image(bodies[done % len(bodies)], shape[:2], shape[2])
            done += 1
        return done

    one = decode_for(1.0) / 1.0
    with ThreadPoolExecutor(workers) as pool:
        many = sum(pool.map(decode_for, [1.0] * workers)) / 1.0
    return {"decode_per_s_1": one, "decode_per_s_workers": many, "decode_workers": workers,
            "jpeg_bytes_mean": float(np.mean([len(b) for b in bodies])), "jpeg_source": f"{source[0]}x{source[1]}"}


def measure(spec_path: str, backend: str, device: str, out: str) -> None:
    import backends
    from cnnbench.infer.plan import serve_run
    from cnnbench.spec import load_spec

    spec = load_spec(spec_path)
    run, variant = serve_run(spec, backend, device)
    module = backends.load(backend)
    for key, value in module.launch_layout(run).env.items():
        os.environ.setdefault(key, value)
    serve = spec.serve
    engine = module.build_serve_engine(run, variant, serve.top_k, serve.pad_multiple)
    buffers = engine.staging_buffers(3, serve.max_batch)
    rng = np.random.default_rng(0)
    for buffer in buffers:
        buffer[:] = rng.integers(0, 256, buffer.shape, dtype=np.uint8)
    engine_img_s, batch_ms = engine_rate(engine, buffers, serve.max_batch)
    result = {"backend": backend, "cuda_graphs": variant.cuda_graphs, "model": run.model,
              "precision": run.precision, "max_batch": serve.max_batch,
              "device_name": engine.device_name(), "engine_img_s": engine_img_s, "batch_ms": batch_ms,
              "batcher_img_s": batcher_rate(engine, serve.max_batch, serve.timeout_ms, 200 * serve.max_batch)}
    source = tuple(int(n) for n in os.environ.get("SOURCE", "500x375").split("x"))
    result.update(_decode_rates(engine.image_shape, source, serve.decode_workers))
    with open(out, "a") as f:
        f.write(json.dumps(result) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    if sys.argv[1:2] == ["measure"]:
        measure(*sys.argv[2:6])
    else:
        sys.exit(__doc__)
