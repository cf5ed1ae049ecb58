"""Reference numbers for `cnnbench serve`, without HTTP (the serving sections of `benchmarks/gpu.py`), and the
summary of `gpu_serve.sh` (``summary OUT_DIR``).

``measure SPEC BACKEND DEVICE OUT.jsonl [SWITCH_MS,...]``: builds the server's own engine (uint8 staging buffers, pinned
on a GPU; the copy stream or async device_put) and appends one JSON line with
- ``engine_img_s``: the engine alone at ``max_batch``, two batches in flight, back to back, launched by
  one thread and collected by another as in the batcher (the model's own throughput with uint8 pinned
  input at the server's batch size: the ceiling of the batcher and of the server);
- ``batch_ms``: one batch of ``max_batch`` alone, launch to top-k on the host (one batch's compute);
- ``small_batch_ms``: one batch of ``pad_multiple`` alone, median of 50: the batch a lone request is padded
  to, so the p99 target at a low rate (deadline + one batch + 5 ms) is checked against this batch's compute;
- ``batcher_img_s``: the pipelined batcher in process, images submitted one by one as fast as one
  thread can;
- ``decode_per_s_1`` / ``decode_per_s_workers``: JPEG decode + resize to the model's size of a
  ``SOURCE`` picture (default 500x375, ImageNet's typical size), one thread and ``decode_workers``
  threads;
- ``engine_launch_ms``: the host time of one launch with the engine alone, and ``batcher_launcher``: where the
  batcher's launcher thread spent the batcher's timed window (``batcher_launch_ms``, the host time of one
  launch there, and the shares of the window it sat idle: no request, a batch filling, the device full);
  a launch slower under the batcher than alone is slowed by the batcher's other threads;
  ``engine_launch_cpu_ms`` and ``batcher_launch_cpu_ms``: the launching thread's own CPU time in one launch
  (``time.thread_time``), alone and under the batcher. A launch whose wall time grows under the batcher while
  its CPU time stays waits (for the GIL, mostly); one whose CPU time grows too does more work or runs slower
  (cores and caches shared with the other threads);
- with ``SWITCH_MS`` (e.g. ``5,1,0.25,0.1``): ``engine_img_s_by_switch_ms`` and ``batcher_img_s_by_switch_ms``,
  the engine alone and the batcher again at each GIL switch interval (`[serve] switch_interval_ms`), in the
  same process, one after the other.
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import json
import os
import queue
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np


def engine_rate(engine, buffers, max_batch: int, windows: int = 5, steps: int = 40,
                in_flight: int = 2) -> tuple[float, float]:
    """(images/s of batches launched back to back, ``in_flight`` in flight; ms of one batch alone).

    One thread launches and another collects, as the batcher's launcher and completer do: in one thread
    the host halves of launch and collect run one after the other, which made the engine alone slower than
    the batcher it is the ceiling of (JAX on an H100, 2026-12-07: 8,091 img/s alone, 11,511 batched)."""
    for index in range(len(buffers)):  # warm every buffer once
        engine.collect(engine.launch(index, max_batch))
    alone = []
    for _ in range(10):
        begun = time.perf_counter()
        engine.collect(engine.launch(0, max_batch))
        alone.append((time.perf_counter() - begun) * 1000)
    rates = [_window_rate(engine, buffers, max_batch, steps, in_flight) for _ in range(windows)]
    return float(np.median(rates)), float(np.median(alone))


def launch_ms(engine, buffers, max_batch: int, steps: int = 40, in_flight: int = 2) -> tuple[float, float]:
    """Mean host time of one ``engine.launch`` (ms) with batches launched back to back as in engine_rate, and
    the launching thread's CPU time in it (ms): for an eager engine its Python, the figures to hold the
    batcher's launches against."""
    spent: list[tuple[float, float]] = []
    _window_rate(engine, buffers, max_batch, steps, in_flight, spent)
    wall, cpu = np.mean(np.array(spent), axis=0)
    return 1000 * float(wall), 1000 * float(cpu)


def _window_rate(engine, buffers, max_batch: int, steps: int, in_flight: int,
                 launch_s: list[tuple[float, float]] | None = None) -> float:
    """Images/s of STEPS batches: this thread launches while fewer than IN_FLIGHT are out, another collects.
    A buffer is launched again only after the batch that used it was collected (len(buffers) > in_flight).
    LAUNCH_S, if given, gets each launch's host time and this thread's CPU time in it, in s."""
    slots, launched = threading.Semaphore(in_flight), queue.SimpleQueue()

    def complete() -> None:
        for _ in range(steps):
            engine.collect(launched.get())
            slots.release()

    completer = threading.Thread(target=complete, name="engine-rate-completer")
    begun = time.perf_counter()
    completer.start()
    for step in range(steps):
        slots.acquire()
        launch_begun, launch_cpu_begun = time.perf_counter(), time.thread_time()
        launched.put(engine.launch(step % len(buffers), max_batch))
        if launch_s is not None:
            launch_s.append((time.perf_counter() - launch_begun, time.thread_time() - launch_cpu_begun))
    completer.join()
    return steps * max_batch / (time.perf_counter() - begun)


def one_batch_ms(engine, size: int, repeats: int = 50) -> float:
    """Median ms of one batch of ``size`` alone, launch to top-k on the host (the shape warmed first)."""
    engine.collect(engine.launch(0, size))
    times = []
    for _ in range(repeats):
        begun = time.perf_counter()
        engine.collect(engine.launch(0, size))
        times.append((time.perf_counter() - begun) * 1000)
    return float(np.median(times))


def batcher_rate(engine, max_batch: int, deadline_ms: float, count: int, launcher: dict | None = None) -> float:
    """Images/s through the pipelined batcher, submitted one by one from one thread. LAUNCHER, if given, gets
    where the batcher's launcher thread spent the timed window: ``batcher_launch_ms`` (mean host time of a
    launch) and the shares of the window it sat idle with no request (``idle_no_request``), while a batch
    filled (``idle_filling``) and with a batch ready but the device full (``idle_device_full``)."""
    from cnnbench.infer.batcher import PipelinedBatcher, QueueFull, batch_shapes

    batcher = PipelinedBatcher(engine, max_batch, deadline_ms, max_queue=4 * max_batch)
    image = np.random.default_rng(0).integers(0, 256, engine.image_shape, dtype=np.uint8)
    for size in batch_shapes(max_batch, engine.pad_multiple):  # every shape, in the batcher's threads
        for future in [batcher.submit(image) for _ in range(size)]:
            future.result()
    futures: collections.deque = collections.deque()
    before = dataclasses.replace(batcher.launcher_times)
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
    seconds = time.perf_counter() - begun
    after = batcher.launcher_times
    batcher.close()
    if launcher is not None:
        launches = max(after.launches - before.launches, 1)
        launcher.update({"batcher_launch_ms": 1000 * (after.launching_s - before.launching_s) / launches,
                         "batcher_launch_cpu_ms": 1000 * (after.launching_cpu_s - before.launching_cpu_s) / launches,
                         "idle_no_request": (after.no_request_s - before.no_request_s) / seconds,
                         "idle_filling": (after.filling_s - before.filling_s) / seconds,
                         "idle_device_full": (after.device_full_s - before.device_full_s) / seconds})
    return count / seconds


def _decode_rates(shape: tuple[int, int, int], source: tuple[int, int], workers: int) -> dict[str, float]:
    from cnnbench.infer.images import decode_image
    from cnnbench.serve.loadgen import request_bodies

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


def by_switch_interval(engine, buffers, serve, switches_ms: list[float]) -> dict[str, dict[str, float]]:
    """The engine alone and the batcher at each GIL switch interval; Python's own is restored after."""
    own = sys.getswitchinterval()
    engines, batchers = {}, {}
    try:
        for switch_ms in switches_ms:
            sys.setswitchinterval(switch_ms / 1000)
            engines[f"{switch_ms:g}"] = engine_rate(engine, buffers, serve.max_batch)[0]
            batchers[f"{switch_ms:g}"] = batcher_rate(engine, serve.max_batch, serve.timeout_ms, 200 * serve.max_batch)
    finally:
        sys.setswitchinterval(own)
    return {"engine_img_s_by_switch_ms": engines, "batcher_img_s_by_switch_ms": batchers}


def measure(spec_path: str, backend: str, device: str, out: str, switches: str = "") -> None:
    from cnnbench.backend import load as load_backend
    from cnnbench.infer.plan import serve_run
    from cnnbench.spec import load_spec

    spec = load_spec(spec_path)
    run, variant = serve_run(spec, backend, device)
    module = load_backend(backend)
    for key, value in module.launch_layout(run).env.items():
        os.environ.setdefault(key, value)
    serve = spec.serve
    engine = module.build_serve_engine(run, variant, serve.top_k, serve.pad_multiple)
    buffers = engine.staging_buffers(3, serve.max_batch)
    rng = np.random.default_rng(0)
    for buffer in buffers:
        buffer[:] = rng.integers(0, 256, buffer.shape, dtype=np.uint8)
    engine_img_s, batch_ms = engine_rate(engine, buffers, serve.max_batch)
    import datetime as dt

    from cnnbench.envinfo import git_sha

    result = {"git_sha": git_sha(), "timestamp_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
              "backend": backend, "cuda_graphs": variant.cuda_graphs, "model": run.model,
              "precision": run.precision, "max_batch": serve.max_batch,
              "device_name": engine.device_name(), "engine_img_s": engine_img_s, "batch_ms": batch_ms,
              "pad_multiple": serve.pad_multiple, "timeout_ms": serve.timeout_ms,
              "small_batch_ms": one_batch_ms(engine, min(serve.pad_multiple, serve.max_batch))}
    result["engine_launch_ms"], result["engine_launch_cpu_ms"] = launch_ms(engine, buffers, serve.max_batch)
    launcher: dict[str, float] = {}
    result["batcher_img_s"] = batcher_rate(engine, serve.max_batch, serve.timeout_ms, 200 * serve.max_batch,
                                           launcher)
    result["batcher_launcher"] = launcher
    if switches:
        result.update(by_switch_interval(engine, buffers, serve, [float(ms) for ms in switches.split(",")]))
    source = tuple(int(n) for n in os.environ.get("SOURCE", "500x375").split("x"))
    result.update(_decode_rates(engine.image_shape, source, serve.decode_workers))
    with open(out, "a") as f:
        f.write(json.dumps(result) + "\n")
    print(json.dumps(result))


def _small_batch(item: dict) -> str:
    """The p99 target at a low rate: the deadline, one batch of the padded size a lone request gets, 5 ms."""
    if "small_batch_ms" not in item:
        return ""
    return (f"; one batch of {item['pad_multiple']} {item['small_batch_ms']:.2f} ms, so p99 target at a low rate "
            f"{item['timeout_ms'] + item['small_batch_ms'] + 5:.1f} ms")


def _config(backend: str, cuda_graphs: bool) -> str:
    """torch, torch-graphs or jax: the engines gpu_serve.sh compares."""
    return f"{backend}-graphs" if cuda_graphs else backend


def summary(folder: str) -> None:
    base = Path(folder)
    pipeline = {}
    if (base / "pipeline.jsonl").exists():
        for line in (base / "pipeline.jsonl").read_text().splitlines():
            item = json.loads(line)
            pipeline[_config(item["backend"], item.get("cuda_graphs", False))] = item
    files = ("stack_http.csv", "serve_http.csv", "frontends_http.csv", "litserve_http.csv")
    rows = [row for name in files if (base / name).exists()
            for row in csv.DictReader((base / name).open())]
    for config, item in pipeline.items():
        print(f"{config}: engine alone at batch {item['max_batch']}: {item['engine_img_s']:,.0f} img/s "
              f"(one batch {item['batch_ms']:.2f} ms){_small_batch(item)}; in-process pipelined batcher "
              f"{item['batcher_img_s']:,.0f} "
              f"img/s ({item['batcher_img_s'] / item['engine_img_s']:.0%}); JPEG {item['jpeg_source']} decode "
              f"{item['decode_per_s_1']:,.0f}/s on 1 thread, {item['decode_per_s_workers']:,.0f}/s on "
              f"{item['decode_workers']}")
    print("backend  batching  input  offered  achieved  vs-engine  p50ms  p90ms  p99ms  mean-batch  client-lag-p99ms  "
          "errors")
    for row in rows:
        config = _config(row["backend"], "cuda_graphs=True" in row["backend_options"])
        engine = pipeline.get(config, {}).get("engine_img_s")
        achieved = float(row["images_per_sec"] or 0)
        share = f"{achieved / engine:.0%}" if engine else "-"
        parser = row["backend_options"].rsplit("http=", 1)[-1] if "http=" in row["backend_options"] else "?"
        cells = [f"{config}({parser})", row["variant"], row["request_input"], row["arrival_rate_rps"],
                 f"{achieved:,.0f}", share, row["latency_ms_p50"] or "-", row["latency_ms_p90"] or "-",
                 row["latency_ms_p99"] or "-",
                 row["mean_batch"] or "-", row.get("client_lag_ms_p99") or "-", row["errors_by_status"] or "none"]
        print("  ".join(cells))


if __name__ == "__main__":
    if sys.argv[1:2] == ["measure"]:
        measure(*sys.argv[2:7])
    elif sys.argv[1:2] == ["summary"]:
        summary(sys.argv[2])
    else:
        sys.exit(__doc__)
