"""The worker side of `cnnbench infer`: forward-only timing, latency percentiles, serving under load.

Timing follows the training protocol: the first batch is timed alone (tracing/compilation),
``warmup_steps`` batches are discarded, then ``windows`` windows of ``window_steps`` batches are
timed with the device synchronized at both ends of a window only. Every batch starts on the host
(pageable, or pinned for the ``pinned`` toggle) and is copied to the device, as in a real
front-end. Latency is measured separately: ``latency_samples`` batches one at a time, each from
host input to logits back on the host.

A backend supplies an :class:`InferenceModel` through ``build_inference(run, variant)``.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from cnnbench.infer_plan import Variant, job_label
from cnnbench.runs import Run
from cnnbench.serving import MicroBatcher, run_open_loop


class InferenceModel(Protocol):
    def host_batch(self, images: np.ndarray) -> Any:
        """NCHW float32 images -> the framework's host-side batch (layout, pinned memory): untimed."""

    def infer(self, host_batch: Any) -> Any:
        """Copy to the device and run the forward pass; asynchronous where the framework is."""

    def fetch(self, output: Any) -> np.ndarray:
        """Logits on the host, float32 (waits for them)."""

    def sync(self) -> None: ...

    def profiler(self, directory: Path) -> contextlib.AbstractContextManager: ...

    def device_name(self) -> str: ...

    def peak_memory_bytes(self) -> int | None: ...


def pad_to_multiple(images: np.ndarray, multiple: int) -> tuple[np.ndarray, int]:
    """(images padded with zeros up to a multiple of ``multiple``, number of valid images); the
    valid count is the mask: results past it are dropped."""
    valid = len(images)
    if multiple <= 1 or valid % multiple == 0:
        return images, valid
    padded = np.zeros((math.ceil(valid / multiple) * multiple, *images.shape[1:]), images.dtype)
    padded[:valid] = images
    return padded, valid


def _percentiles(values: list[float]) -> dict[str, float]:
    array = np.asarray(values)
    return {"latency_ms_p50": float(np.percentile(array, 50)), "latency_ms_p90": float(np.percentile(array, 90)),
            "latency_ms_p99": float(np.percentile(array, 99))}


def measure_batches(model: InferenceModel, images: np.ndarray, variant: Variant, run: Run,
                    latency_samples: int, profile_to: Path | None = None) -> dict[str, Any]:
    padded, valid = pad_to_multiple(images, variant.pad_multiple)
    host = model.host_batch(padded)
    begun = time.perf_counter()
    model.infer(host)
    model.sync()
    first_s = time.perf_counter() - begun
    for _ in range(run.warmup_steps):
        model.infer(host)
    window_ms = []
    for _ in range(run.windows):
        model.sync()
        begun = time.perf_counter()
        for _ in range(run.window_steps):
            model.infer(host)
        model.sync()
        window_ms.append((time.perf_counter() - begun) * 1000.0 / run.window_steps)
    latencies = []
    for _ in range(latency_samples):
        begun = time.perf_counter()
        logits = model.fetch(model.infer(host))[:valid]
        latencies.append((time.perf_counter() - begun) * 1000.0)
    median = float(np.median(window_ms))
    result = {
        "first_step_s": first_s, "window_step_ms": window_ms, "step_time_ms_median": median,
        "step_time_ms_p10": float(np.percentile(window_ms, 10)),
        "step_time_ms_p90": float(np.percentile(window_ms, 90)),
        "images_per_sec": valid / (median / 1000.0), "logits_shape": list(logits.shape),
        **_percentiles(latencies),
    }
    if profile_to is not None:  # one more window, traced, after (and outside) the measurement
        with model.profiler(profile_to):
            for _ in range(run.window_steps):
                model.infer(host)
            model.sync()
        result["profile_path"] = str(profile_to)
    return result


def serve_under_load(model: InferenceModel, images: np.ndarray, job: dict[str, Any], seed: int) -> dict[str, Any]:
    multiple, max_batch = job["pad_multiple"], job["batch"]

    def handler(batch: np.ndarray) -> np.ndarray:
        padded, valid = pad_to_multiple(batch, multiple)
        return model.fetch(model.infer(model.host_batch(padded)))[:valid]

    batcher = MicroBatcher(handler, max_batch, job["timeout_ms"])
    # Run every padded shape the batcher can produce, in the batcher's own thread, before the clock
    # starts: compilation, autotuning and per-thread library handles (cuDNN, cuBLAS) are set up on
    # first use in each thread, and a slow first batch under load leaves a backlog behind it.
    for size in sorted({min(math.ceil(n / multiple) * multiple, max_batch) for n in range(1, max_batch + 1)}):
        for _ in range(2):
            for request in [batcher.submit(images[i % len(images)]) for i in range(size)]:
                request.future.result()
    batcher.batch_sizes.clear()
    batcher.batch_ms.clear()
    try:
        load = run_open_loop(batcher.submit, images, job["rate"], job["requests"], job["max_duration_s"],
                             seed, batch_sizes=lambda: batcher.batch_sizes)
    finally:
        batcher.close()
    return {"images_per_sec": load.achieved_rps, "requests": load.requests, "mean_batch": load.mean_batch,
            "step_time_ms_median": float(np.median(batcher.batch_ms)) if batcher.batch_ms else None,
            "arrival_rate_rps": job["rate"], "max_batch": max_batch, "batch_timeout_ms": job["timeout_ms"],
            **{k: load.percentile(q) for k, q in (("latency_ms_p50", 50), ("latency_ms_p90", 90),
                                                   ("latency_ms_p99", 99))}}


def run_inference(run: Run, build: Callable[[Run, Variant], InferenceModel], images: np.ndarray,
                  log: Callable[[str], None]) -> dict[str, Any]:
    """Every job of the run's plan; a job that fails gets its error, the others still run."""
    jobs = run.infer["jobs"]
    profile_dir = run.profile_dir
    sweep_batches = [j["batch"] for j in jobs if j["kind"] == "sweep"]
    profiled_batch = max(sweep_batches) if profile_dir and sweep_batches else None
    results: list[dict[str, Any]] = []
    model, built_for, facts = None, None, {}
    for job in jobs:
        variant = Variant(**job["variant"])
        config = Variant(**{**job["variant"], "name": ""})
        try:
            if built_for != config:
                model, built_for = None, None  # free the previous model before building the next
                model, built_for = build(run, variant), config
                facts = {"device_name": model.device_name()}
            if job["kind"] == "serve":
                result = serve_under_load(model, images, job, run.seed)
            else:
                trace = None
                if job["kind"] == "sweep" and job["batch"] == profiled_batch:
                    trace = Path(profile_dir) / f"{run.backend}-{run.precision}-b{job['batch']}"
                    profiled_batch = None
                result = measure_batches(model, images[: job["batch"]], variant, run,
                                         run.infer["latency_samples"], trace)
            result["peak_memory_bytes"] = model.peak_memory_bytes()
            log(f"{job_label(job)}: {result['images_per_sec']:.0f} img/s, "
                f"p50 {result['latency_ms_p50']:.2f} ms")
        except Exception as exc:  # noqa: BLE001 - one failing variant (e.g. a compiler error) is a failed row
            model, built_for = None, None
            result = {"error": f"{type(exc).__name__}: {exc}".strip()}
            log(f"{job_label(job)}: failed: {result['error']}")
        results.append({**facts, **result})
    return {"jobs": results}
