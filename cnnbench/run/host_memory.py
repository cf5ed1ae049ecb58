"""Host memory limits that decide how much can be page-locked (pinned), for clear pinning errors.

A failed ``cudaHostAlloc`` comes back from PyTorch as "CUDA error: out of memory", which reads like a
GPU problem. It is host memory: the message built here names the request and every limit that could
apply, so the user looks in the right place. Which limit really applies is measured by
``benchmarks/health_pitfalls.py pinned`` (see docs/health.md): RLIMIT_MEMLOCK (``ulimit -l``) governs
``mlock``, the cgroup's ``memory.max`` every page the process holds, and the free RAM of the host.
"""

from __future__ import annotations

import resource
from pathlib import Path


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _text(value: int | None) -> str:
    if value is None:
        return "unknown"
    if value == resource.RLIM_INFINITY or value < 0:
        return "unlimited"
    return f"{value / 2**30:.2f} GiB"


def cgroup_memory_max() -> int | None:
    """The cgroup (v2, else v1) memory limit of this process in bytes; -1 for none; None if unknown."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        text = _read(path)
        if text is not None:
            return -1 if text == "max" or int(text) >= 2**60 else int(text)
    return None


def meminfo_bytes(field: str) -> int | None:
    for line in (_read("/proc/meminfo") or "").splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return None


def limits() -> dict[str, int | None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return {"rlimit_memlock_soft": soft, "rlimit_memlock_hard": hard, "cgroup_memory_max": cgroup_memory_max(),
            "mem_available": meminfo_bytes("MemAvailable"), "mem_total": meminfo_bytes("MemTotal")}


def pinning_error(nbytes: int, cause: BaseException) -> str:
    """One line: what was asked for, the host limits, and that this is not GPU memory."""
    found = limits()
    reason = str(cause).splitlines()[0][:200].rstrip(".") if str(cause) else type(cause).__name__
    return (f"pinning {nbytes / 2**20:.1f} MiB of host memory (page-locked, for fast copies) failed: "
            f"{reason}. This is host RAM, not GPU memory. Limits here: "
            f"RLIMIT_MEMLOCK (ulimit -l) soft {_text(found['rlimit_memlock_soft'])} / hard "
            f"{_text(found['rlimit_memlock_hard'])}, cgroup memory.max {_text(found['cgroup_memory_max'])}, "
            f"MemAvailable {_text(found['mem_available'])} of {_text(found['mem_total'])}. Pin less (smaller "
            f"staging buffers, fewer prefetched batches) or turn pinning off")
