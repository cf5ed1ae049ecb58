"""GPU utilisation, memory and power sampled by NVML in a background thread of the worker.

Optional and cheap: without ``nvidia-ml-py`` or an NVIDIA driver :func:`start` returns None and the
run goes on without these columns. One sample every ``interval_s`` (a few NVML calls, well under a
millisecond); only samples inside the timed windows count. Each sample also lists the processes
holding GPU memory: the worker's own children (DataLoader workers) must hold none, a worker that
touched CUDA holds a context of its own (hundreds of MiB).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Sample:
    t: float  # time.perf_counter()
    util_pct: float
    memory_mb: float
    power_w: float | None
    children_mb: float | None  # GPU memory of this process's children; None where pids cannot be matched


def nvml_index(local_rank: int) -> int:
    """NVML numbers GPUs physically and ignores CUDA_VISIBLE_DEVICES: map the process's device back."""
    visible = [part for part in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if part.strip()]
    if visible and all(part.strip().isdigit() for part in visible) and local_rank < len(visible):
        return int(visible[local_rank])
    return local_rank


class GpuMonitor:
    def __init__(self, nvml, handle, interval_s: float) -> None:
        self.nvml, self.handle, self.interval_s = nvml, handle, interval_s
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cnnbench-nvml", daemon=True)

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

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append(self._sample())
            except Exception:  # noqa: BLE001 - a monitoring hiccup must never fail the run
                pass
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass

    def summary(self, spans: list[tuple[float, float]]) -> dict[str, float | None]:
        """The row's NVML columns from the samples inside ``spans`` (perf_counter intervals)."""
        inside = [s for s in self.samples if any(a <= s.t <= b for a, b in spans)] or self.samples
        if not inside:
            return {}
        powers = [s.power_w for s in inside if s.power_w is not None]
        children = [s.children_mb for s in inside if s.children_mb is not None]
        return {
            "nvml_gpu_util_pct": sum(s.util_pct for s in inside) / len(inside),
            "nvml_memory_used_mb": max(s.memory_mb for s in inside),
            "nvml_power_w": sum(powers) / len(powers) if powers else None,
            # Any sample counts: a worker's CUDA context appears when it starts and stays.
            "loader_gpu_mb": max(s.children_mb for s in self.samples if s.children_mb is not None)
            if children else None,
        }


def start(local_rank: int, interval_s: float = 0.2) -> GpuMonitor | None:
    """A running monitor of this process's GPU, or None where NVML is not available."""
    try:
        import pynvml as nvml
    except ImportError:
        return None
    try:
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(nvml_index(local_rank))
    except nvml.NVMLError:
        return None
    monitor = GpuMonitor(nvml, handle, interval_s)
    monitor._thread.start()
    return monitor
