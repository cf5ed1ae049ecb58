"""GPU utilisation, memory, power and energy from NVML, for the timed windows of a worker.

Optional and cheap: without ``nvidia-ml-py`` or an NVIDIA driver :func:`start` returns None and the
run goes on without these columns. A background thread reads memory, power and utilisation every
``interval_s`` (a few NVML calls, well under a millisecond); only readings that belong to the timed
windows count, and a window that no reading covers gives an empty column, never the mean of the
whole run (compilation and evaluation included), which is what made a busy GPU read 0-29% before.

Utilisation needs care: NVML's figure is the share of a *past sampling period* (1/6 s to 1 s,
by product) during which a kernel ran. The driver keeps its own timestamped samples
(``nvmlDeviceGetSamples``); each covers the time since the one before, and only samples whose
whole period lies inside a timed window count. Where the driver has no such samples, a reading of
``nvmlDeviceGetUtilizationRates`` counts only when the longest period (1 s) before it lies inside a
window. Short windows (a few steps of tens of ms) thus give no utilisation: lengthen
``window_steps``; the trace's GPU busy share is the exact figure.

Energy: ``nvmlDeviceGetTotalEnergyConsumption`` (mJ since the driver loaded, Volta and later) is
read where the protocol synchronizes the device, at both ends of every timed window, summed over
the run's GPUs on this host (:meth:`GpuMonitor.energy_mj`).

Each reading also lists the processes holding GPU memory: the worker's own children (DataLoader
workers) must hold none, a worker that touched CUDA holds a context of its own (hundreds of MiB).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

# The longest period NVML's utilisation figure may cover (its documentation: 1 s to 1/6 s).
UTIL_LOOKBACK_S = 1.0
# NVML's energy counter moves in steps (about 0.1 s on an H200): windows shorter than this in all
# would carry more than a 5% error, so they get no energy columns.
ENERGY_MIN_S = 2.0


@dataclass(frozen=True)
class Sample:
    t: float  # time.perf_counter()
    util_pct: float
    memory_mb: float
    power_w: float | None
    children_mb: float | None  # GPU memory of this process's children; None where pids cannot be matched


@dataclass(frozen=True)
class UtilSample:
    """One of the driver's utilisation samples: the share of (start, end] a kernel ran, perf_counter s."""

    start: float
    end: float
    util_pct: float


def nvml_index(local_rank: int) -> int | str:
    """NVML numbers GPUs physically and ignores CUDA_VISIBLE_DEVICES: map the process's device back
    (a UUID where the variable lists UUIDs)."""
    visible = [part.strip() for part in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if part.strip()]
    if visible and local_rank < len(visible):
        entry = visible[local_rank]
        return int(entry) if entry.isdigit() else entry
    return local_rank


def inside(spans: Sequence[tuple[float, float]], start: float, end: float) -> bool:
    """(start, end] lies wholly inside one of ``spans``."""
    return any(a <= start and end <= b for a, b in spans)


class GpuMonitor:
    def __init__(self, nvml, handles: list, interval_s: float) -> None:
        self.nvml, self.handles, self.interval_s = nvml, handles, interval_s
        self.handle = handles[0]  # this process's own GPU
        self.samples: list[Sample] = []
        self.util_samples: list[UtilSample] = []
        self._driver_seen: list[int | None] = [None] * len(handles)  # last driver timestamp, µs
        self._epoch_minus_perf = time.time() - time.perf_counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cnnbench-nvml", daemon=True)

    # -- energy, read by the protocol at the ends of its windows --------------------------------
    def energy_mj(self) -> float | None:
        """The run's GPUs' energy counters summed, mJ; None where the GPU has no counter."""
        try:
            return float(sum(self.nvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in self.handles))
        except self.nvml.NVMLError:
            return None

    # -- background readings ---------------------------------------------------------------------
    def _children_mb(self) -> float | None:
        import psutil

        try:
            running = self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle)
        except self.nvml.NVMLError:
            return None
        used = {p.pid: (p.usedGpuMemory or 0) / 2**20 for p in running}
        if os.getpid() not in used:  # another PID namespace (a container): pids do not match ours
            return None
        children = {c.pid for c in psutil.Process().children(recursive=True)}
        return sum(mb for pid, mb in used.items() if pid in children)

    def _sample(self) -> Sample:
        nvml, handle = self.nvml, self.handle
        util = nvml.nvmlDeviceGetUtilizationRates(handle)
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        try:
            power = nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
        except nvml.NVMLError:
            power = None
        return Sample(time.perf_counter(), float(util.gpu), memory.used / 2**20, power, self._children_mb())

    def _driver_samples(self) -> None:
        """New driver utilisation samples of every GPU; each covers the time since its predecessor."""
        nvml = self.nvml
        for i, handle in enumerate(self.handles):
            last = self._driver_seen[i]
            try:
                _, found = nvml.nvmlDeviceGetSamples(handle, nvml.NVML_GPU_UTILIZATION_SAMPLES, last or 0)
            except nvml.NVMLError:
                continue  # none new (NVML_ERROR_NOT_FOUND) or not supported: the readings remain
            for sample in sorted(found, key=lambda s: s.timeStamp):
                if last is not None and sample.timeStamp > last:
                    to_perf = 1e-6 * sample.timeStamp - self._epoch_minus_perf
                    self.util_samples.append(UtilSample(to_perf - 1e-6 * (sample.timeStamp - last), to_perf,
                                                        float(sample.sampleValue.uiVal)))
                last = sample.timeStamp if last is None else max(last, sample.timeStamp)
            self._driver_seen[i] = last

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append(self._sample())
                self._driver_samples()
            except Exception:  # noqa: BLE001 - a monitoring hiccup must never fail the run
                pass
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        try:
            self._driver_samples()
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass

    # -- the row's columns -----------------------------------------------------------------------
    def utilisation(self, spans: Sequence[tuple[float, float]]) -> float | None:
        """Mean utilisation over the driver samples (else readings) whose period lies inside ``spans``."""
        covered = [s.util_pct for s in self.util_samples if inside(spans, s.start, s.end)]
        if not covered and not self.util_samples:
            covered = [s.util_pct for s in self.samples if inside(spans, s.t - UTIL_LOOKBACK_S, s.t)]
        return sum(covered) / len(covered) if covered else None

    def summary(self, spans: Sequence[tuple[float, float]]) -> dict[str, float | None]:
        """The row's NVML columns for the timed windows ``spans`` (perf_counter intervals)."""
        if not self.samples:
            return {}
        within = [s for s in self.samples if inside(spans, s.t, s.t)]
        powers = [s.power_w for s in within if s.power_w is not None]
        children = [s.children_mb for s in self.samples if s.children_mb is not None]
        return {
            "nvml_gpu_util_pct": self.utilisation(spans),
            "nvml_memory_used_mb": max(s.memory_mb for s in (within or self.samples)),
            "nvml_power_w": sum(powers) / len(powers) if powers else None,
            # Any reading counts: a worker's CUDA context appears when it starts and stays.
            "loader_gpu_mb": max(children) if children else None,
        }


def energy_columns(window_energy_j: Sequence[float | None], spans: Sequence[tuple[float, float]],
                   images: float, gpus: int) -> dict[str, float | None]:
    """``energy_j_per_image`` (all ``gpus``' energy over the windows / the images they handled) and
    ``mean_power_w`` (per GPU) from the energy each timed window used; empty where any is missing or
    the windows last under :data:`ENERGY_MIN_S` in all."""
    seconds = sum(b - a for a, b in spans)
    if (not window_energy_j or any(e is None for e in window_energy_j) or not images
            or seconds < ENERGY_MIN_S):
        return {"energy_j_per_image": None, "mean_power_w": None}
    joules = float(sum(window_energy_j))  # type: ignore[arg-type]
    return {"energy_j_per_image": joules / images, "mean_power_w": joules / seconds / max(gpus, 1)}


def start(local_rank: int, interval_s: float = 0.1, gpus: int = 1) -> GpuMonitor | None:
    """A running monitor of this process's GPU and the run's other ``gpus`` - 1 on this host (local
    ranks after it), or None where NVML is not available."""
    try:
        import pynvml as nvml
    except ImportError:
        return None
    try:
        nvml.nvmlInit()
        handles = []
        for rank in range(local_rank, local_rank + max(gpus, 1)):
            index = nvml_index(rank)
            handles.append(nvml.nvmlDeviceGetHandleByUUID(index) if isinstance(index, str)
                           else nvml.nvmlDeviceGetHandleByIndex(index))
    except nvml.NVMLError:
        return None
    monitor = GpuMonitor(nvml, handles, interval_s)
    monitor._thread.start()
    return monitor


class EnergyMeter:
    """Energy of each timed window: read at its start and end (where the device is synchronized)."""

    def __init__(self, monitor: GpuMonitor | None) -> None:
        self.monitor = monitor
        self.window_j: list[float | None] = []
        self._begun: float | None = None

    def window_start(self) -> None:
        self._begun = self.monitor.energy_mj() if self.monitor else None

    def window_end(self) -> None:
        end = self.monitor.energy_mj() if self.monitor else None
        self.window_j.append((end - self._begun) / 1000.0 if end is not None and self._begun is not None else None)
