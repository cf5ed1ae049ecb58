"""The worker side of `cnnbench infer`: forward-only timing, latency percentiles, serving under load.

Timing follows the training protocol: the first batch is timed alone (tracing/compilation),
``warmup_steps`` batches are discarded, then ``windows`` windows of ``window_steps`` batches are
timed with the device synchronized at both ends of a window only. Each batch starts where the
variant's ``input`` says: already on the device (``resident``: the model's own rate), or on the
host (uint8 or float32, pinned or pageable memory) and copied to the device inside the timed
loop, as in a real front-end. Latency is measured separately: ``latency_samples`` batches one at
a time, each from its starting place to logits back on the host.

The images come twice: uint8 NHWC pixels, and the same pixels normalised on the host into
float32 NCHW (:func:`cnnbench.data.normalize.normalize_uint8_nhwc`); uint8 inputs start from the
first, float32 and resident ones from the second, so every input mode computes the same logits.

A backend supplies an :class:`InferenceModel` through ``build_inference(run, variant)``.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cnnbench.backend import InferenceModel
from cnnbench.errors import error_line
from cnnbench.gpu_monitor import energy_columns
from cnnbench.infer.micro_batcher import MicroBatcher, run_open_loop
from cnnbench.runs import InferJob, InferRun, Variant

# NVML's total energy counter of the run's GPUs, mJ (None: no counter); read where the device is synchronized.
EnergyReader = Callable[[], "float | None"]


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


@dataclass
class Measurement:
    """Raw timings of one variant at one batch size; rounds of the ablation add to it."""

    valid: int
    first_s: float
    window_ms: list[float] = field(default_factory=list)
    latency_ms: list[float] = field(default_factory=list)
    profile_path: str | None = None
    window_energy_j: list[float | None] = field(default_factory=list)  # empty: not metered
    images_per_window: int = 0

    def summary(self) -> dict[str, Any]:
        median = float(np.median(self.window_ms))
        out = {"first_step_s": self.first_s, "window_step_ms": self.window_ms, "step_time_ms_median": median,
               "step_time_ms_p10": float(np.percentile(self.window_ms, 10)),
               "step_time_ms_p90": float(np.percentile(self.window_ms, 90)),
               "images_per_sec": self.valid / (median / 1000.0), **_percentiles(self.latency_ms)}
        if self.profile_path:
            out["profile_path"] = self.profile_path
        if self.window_energy_j:
            spans = [(0.0, ms * self.images_per_window / self.valid / 1000.0) for ms in self.window_ms]
            out.update(energy_columns(self.window_energy_j, spans, self.images_per_window * len(self.window_ms), 1))
        return out


@dataclass(frozen=True)
class InferImages:
    """The same images as uint8 NHWC pixels and normalised float32 NCHW."""

    uint8_nhwc: np.ndarray
    float32_nchw: np.ndarray

    def first(self, count: int) -> InferImages:
        return InferImages(self.uint8_nhwc[:count], self.float32_nchw[:count])

    def for_input(self, source: str) -> np.ndarray:
        return self.uint8_nhwc if source.startswith("uint8") else self.float32_nchw


def measure_batches(model: InferenceModel, images: InferImages, variant: Variant, run: InferRun,
                    latency_samples: int, into: Measurement | None = None,
                    profile_to: Path | None = None, energy: EnergyReader | None = None) -> Measurement:
    """Time one variant at one batch size (first call, warm-up, windows, then latency samples);
    ``into`` continues an earlier measurement (another round of the ablation)."""
    padded, valid = pad_to_multiple(images.for_input(variant.input), variant.pad_multiple)
    host = model.host_batch(padded, variant.input)
    if into is None:
        begun = time.perf_counter()
        model.infer(host)
        model.sync()
        into = Measurement(valid, time.perf_counter() - begun)
    for _ in range(run.warmup_steps):
        model.infer(host)
    for _ in range(run.windows):
        model.sync()
        before = energy() if energy else None
        begun = time.perf_counter()
        for _ in range(run.window_steps):
            model.infer(host)
        model.sync()
        into.window_ms.append((time.perf_counter() - begun) * 1000.0 / run.window_steps)
        if energy:
            after = energy()
            into.window_energy_j.append((after - before) / 1000.0 if None not in (before, after) else None)
            into.images_per_window = into.valid * run.window_steps
    for _ in range(latency_samples):
        begun = time.perf_counter()
        model.fetch(model.infer(host))[:valid]
        into.latency_ms.append((time.perf_counter() - begun) * 1000.0)
    if profile_to is not None:  # one more window, traced, after (and outside) the measurement
        with model.profiler(profile_to):
            for _ in range(run.window_steps):
                model.infer(host)
            model.sync()
        into.profile_path = str(profile_to)
    return into


def serve_under_load(model: InferenceModel, images: np.ndarray, job: InferJob, seed: int,
                     energy: EnergyReader | None = None) -> dict[str, Any]:
    multiple, max_batch = job.pad_multiple, job.batch

    def handler(batch: np.ndarray) -> np.ndarray:
        padded, valid = pad_to_multiple(batch, multiple)
        return model.fetch(model.infer(model.host_batch(padded)))[:valid]

    batcher = MicroBatcher(handler, max_batch, job.timeout_ms)
    # Run every padded shape the batcher can produce, in the batcher's own thread, before the clock
    # starts: compilation, autotuning and per-thread library handles (cuDNN, cuBLAS) are set up on
    # first use in each thread, and a slow first batch under load leaves a backlog behind it.
    for size in sorted({min(math.ceil(n / multiple) * multiple, max_batch) for n in range(1, max_batch + 1)}):
        for _ in range(2):
            for request in [batcher.submit(images[i % len(images)]) for i in range(size)]:
                request.future.result()
    batcher.batch_sizes.clear()
    batcher.batch_ms.clear()
    model.sync()
    before, begun = (energy() if energy else None), time.perf_counter()
    try:
        load = run_open_loop(batcher.submit, images, job.rate, job.requests, job.max_duration_s,
                             seed, batch_sizes=lambda: batcher.batch_sizes)
    finally:
        batcher.close()
    model.sync()
    after, seconds = (energy() if energy else None), time.perf_counter() - begun
    # Every answered request is one image; idle time between arrivals counts: it is what serving costs.
    watts = energy_columns([(after - before) / 1000.0 if None not in (before, after) else None],
                           [(0.0, seconds)], load.requests, 1) if energy else {}
    return {**watts,"images_per_sec": load.achieved_rps, "requests": load.requests, "mean_batch": load.mean_batch,
            "step_time_ms_median": float(np.median(batcher.batch_ms)) if batcher.batch_ms else None,
            "arrival_rate_rps": job.rate, "max_batch": max_batch, "batch_timeout_ms": job.timeout_ms,
            **{k: load.percentile(q) for k, q in (("latency_ms_p50", 50), ("latency_ms_p90", 90),
                                                   ("latency_ms_p99", 99))}}


def _failure(exc: BaseException) -> dict[str, Any]:
    return {"error": error_line(exc)}


def run_inference(run: InferRun, build: Callable[[InferRun, Variant], InferenceModel], images: InferImages,
                  log: Callable[[str], None], energy: EnergyReader | None = None) -> dict[str, Any]:
    """Every job of the run's plan; a job that fails gets its error, the others still run.

    Sweep and serve jobs build one model at a time; variants that differ only in their input share
    it (one model takes every input, so the sweep over inputs compiles each batch shape once per
    input dtype, not once per input). Ablation models are all built first and then
    measured in ``rounds`` interleaved rounds (baseline, toggle 1, ..., all; again ...), so that a
    slow spell of the machine (host copies from pageable memory vary a lot) does not land on one
    variant only; each row summarises all its rounds."""
    jobs = run.jobs
    results: list[dict[str, Any] | None] = [None] * len(jobs)
    sweep_batches = [j.batch for j in jobs if j.kind == "sweep"]
    profiled_batch = max(sweep_batches) if run.profile_dir and sweep_batches else None
    model, built_for = None, None
    for index, job in enumerate(jobs):
        if job.kind == "ablation":
            continue
        variant = job.variant
        config = dataclasses.replace(variant, name="", input="")
        try:
            if built_for != config:
                model, built_for = None, None  # free the previous model before building the next
                model, built_for = build(run, variant), config
            if job.kind == "serve":
                result = serve_under_load(model, images.float32_nchw, job, run.seed, energy)
            else:
                trace = None
                if job.batch == profiled_batch:
                    trace = Path(run.profile_dir) / f"{run.backend}-{run.precision}-b{job.batch}"
                    profiled_batch = None
                result = measure_batches(model, images.first(job.batch), variant, run,
                                         run.latency_samples, profile_to=trace, energy=energy).summary()
            result.update(device_name=model.device_name(), peak_memory_bytes=model.peak_memory_bytes())
        except Exception as exc:  # noqa: BLE001 - one failing variant (e.g. a compiler error) is a failed row
            model, built_for, result = None, None, _failure(exc)
        results[index] = result
        _log_job(log, job, result)
    model = None
    _run_ablation(run, build, images, jobs, results, log, energy)
    return {"jobs": results}


def _run_ablation(run: InferRun, build: Callable[[InferRun, Variant], InferenceModel], images: InferImages,
                  jobs: tuple[InferJob, ...], results: list[dict[str, Any] | None],
                  log: Callable[[str], None], energy: EnergyReader | None = None) -> None:
    indices = [i for i, job in enumerate(jobs) if job.kind == "ablation"]
    models: dict[int, InferenceModel] = {}
    for i in indices:
        try:
            models[i] = build(run, jobs[i].variant)
        except Exception as exc:  # noqa: BLE001
            results[i] = _failure(exc)
    measured: dict[int, Measurement] = {}
    for _ in range(run.rounds):
        for i in list(models):
            job = jobs[i]
            try:
                measured[i] = measure_batches(models[i], images.first(job.batch), job.variant, run,
                                              run.latency_samples, into=measured.get(i), energy=energy)
            except Exception as exc:  # noqa: BLE001
                results[i] = _failure(exc)
                del models[i]
    for i, model in models.items():
        results[i] = {**measured[i].summary(), "device_name": model.device_name(),
                      "peak_memory_bytes": model.peak_memory_bytes()}
        _log_job(log, jobs[i], results[i])


def _log_job(log: Callable[[str], None], job: InferJob, result: dict[str, Any]) -> None:
    if "error" in result:
        log(f"{job.label}: failed: {result['error']}")
    else:
        log(f"{job.label}: {result['images_per_sec']:.0f} img/s, p50 {result['latency_ms_p50']:.2f} ms")
