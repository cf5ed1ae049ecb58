"""The shared-memory ring between front-end processes and the engine process.

One POSIX shared-memory segment (/dev/shm/cnnbench-serve-<pid>-<token>) holds:

- a header of int64 words: the engine's state, its batch-size histogram and queue depth (written by
  the engine's batch threads only), one row of answer counters per front end (each front end writes
  only its own row), and the engine's failure message;
- ``slots`` input slots of the model's (H, W, C) uint8 shape: a front end decodes a request and writes
  its pixels into a free slot of its own share (front end i owns slots i*k .. i*k+k-1, so no slot is
  ever contended between processes), then sends the engine a descriptor (slot, request id, arrival);
- each slot's top-k class ids and probabilities, written by the engine before it signals the answer;
- the engine's time (its batcher's launcher times and its process's CPU time, in microseconds), written
  by the engine after each served batch, for the front ends' /metrics.

The supervisor creates and removes the segment; the others attach. Python's resource tracker (shared by
every process of the server, all spawned from the supervisor) removes it too if every process dies.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
from dataclasses import dataclass
from multiprocessing import shared_memory

import numpy as np

from cnnbench.errors import UserError
from cnnbench.infer.batcher import LauncherTimes
from cnnbench.serve.config import MAX_FRONTENDS

PREFIX = "cnnbench-serve"
LOADING, READY, FAILED, STOPPED = 0, 1, 2, 3
COUNTED_STATUSES = (200, 400, 404, 408, 413, 415, 431, 500, 503, 504)  # the rest count as "other"
_HEADER_WORDS = 2048  # 16 KiB
_STATE, _BATCHES, _IMAGES, _DEPTH, _BUCKETS = 0, 1, 2, 3, 8  # word offsets; buckets: 8 .. 8+64
_COUNTERS = 80  # MAX_FRONTENDS rows of len(COUNTED_STATUSES) + 1 words
_ENGINE_TIMES = 960  # the engine's LauncherTimes fields, then its process's CPU seconds, in millionths
_MESSAGE = 1024  # words 1024.. hold the failure message, UTF-8
_ALIGN = 4096


@dataclass(frozen=True)
class RingLayout:
    """Everything a process needs to attach to the ring (picklable)."""

    name: str
    slots: int
    image_shape: tuple[int, int, int]
    top_k: int
    batch_buckets: tuple[int, ...]

    def offsets(self) -> tuple[int, int, int, int]:
        """(pixels, class ids, scores, total) byte offsets."""
        pixels = _HEADER_WORDS * 8
        ids = pixels + _round_up(self.slots * int(np.prod(self.image_shape)))
        scores = ids + _round_up(self.slots * self.top_k * 4)
        return pixels, ids, scores, scores + _round_up(self.slots * self.top_k * 4)


def _round_up(size: int) -> int:
    return -(-size // _ALIGN) * _ALIGN


def segment_names(supervisor_pid: int) -> list[str]:
    """The ring segments of one server (by its supervisor's pid) present in /dev/shm."""
    try:
        return sorted(n for n in os.listdir("/dev/shm") if n.startswith(f"{PREFIX}-{supervisor_pid}-"))
    except FileNotFoundError:
        return []


class Ring:
    def __init__(self, layout: RingLayout, memory: shared_memory.SharedMemory) -> None:
        self.layout, self.memory = layout, memory
        self.batch_buckets = layout.batch_buckets
        pixels, ids, scores, _ = layout.offsets()
        buffer = memory.buf
        self.header = np.ndarray((_HEADER_WORDS,), np.int64, buffer, 0)
        self.pixels = np.ndarray((layout.slots, *layout.image_shape), np.uint8, buffer, pixels)
        self.class_ids = np.ndarray((layout.slots, layout.top_k), np.int32, buffer, ids)
        self.scores = np.ndarray((layout.slots, layout.top_k), np.float32, buffer, scores)

    @classmethod
    def create(cls, slots: int, image_shape: tuple[int, int, int], top_k: int,
               batch_buckets: list[int]) -> Ring:
        """A new zeroed segment named after this process; refused when /dev/shm cannot hold it (a
        segment larger than the free space would fail later, with SIGBUS, when a slot is first written)."""
        layout = RingLayout(f"{PREFIX}-{os.getpid()}-{secrets.token_hex(4)}", slots, tuple(image_shape), top_k,
                            tuple(batch_buckets))
        size = layout.offsets()[3]
        stat = os.statvfs("/dev/shm")
        if size > stat.f_bavail * stat.f_frsize:
            raise UserError(f"serve: the request ring needs {size / 2**20:,.0f} MiB of /dev/shm and "
                            f"{stat.f_bavail * stat.f_frsize / 2**20:,.0f} MiB are free: lower max_queue or "
                            f"frontends, or enlarge /dev/shm")
        if len(batch_buckets) > _COUNTERS - _BUCKETS:
            raise UserError(f"serve: {len(batch_buckets)} batch-size buckets, at most {_COUNTERS - _BUCKETS}")
        return cls(layout, shared_memory.SharedMemory(layout.name, create=True, size=size))

    @classmethod
    def attach(cls, layout: RingLayout) -> Ring:
        return cls(layout, shared_memory.SharedMemory(layout.name))

    def close(self) -> None:
        """Drop this process's mapping (the arrays first: a mapping with views cannot close)."""
        del self.header, self.pixels, self.class_ids, self.scores
        self.memory.close()

    def unlink(self) -> None:
        try:
            self.memory.unlink()
        except FileNotFoundError:
            pass

    # -- the engine's state ----------------------------------------------------------------------

    @property
    def state(self) -> int:
        return int(self.header[_STATE])

    def set_state(self, state: int, message: str = "") -> None:
        if message:
            data = message.encode()[: (_HEADER_WORDS - _MESSAGE) * 8 - 1]
            area = self.header[_MESSAGE:].view(np.uint8)
            area[: len(data)] = np.frombuffer(data, np.uint8)
            area[len(data)] = 0
        self.header[_STATE] = state

    def message(self) -> str:
        area = bytes(self.header[_MESSAGE:].view(np.uint8))
        return area.split(b"\0", 1)[0].decode(errors="replace")

    # -- batch figures (engine) and answer counters (front ends) ----------------------------------

    def record_batch(self, size: int, seconds: float = 0.0) -> None:
        index = next((i for i, bound in enumerate(self.batch_buckets) if size <= bound), len(self.batch_buckets) - 1)
        self.header[_BUCKETS + index] += 1
        self.header[_IMAGES] += size
        self.header[_BATCHES] += 1

    def set_queue_depth(self, depth: int) -> None:
        self.header[_DEPTH] = depth

    def queue_depth(self) -> int:
        return int(self.header[_DEPTH])

    def batch_histogram(self) -> tuple[list[int], float, int]:
        """(batches per bucket, images in them, batches)."""
        counts = [int(c) for c in self.header[_BUCKETS:_BUCKETS + len(self.batch_buckets)]]
        return counts, float(self.header[_IMAGES]), int(self.header[_BATCHES])

    def record_engine_times(self, times: LauncherTimes, process_cpu_s: float) -> None:
        """The engine's time so far (engine process, after each served batch): every LauncherTimes field,
        then the process's CPU seconds, each in millionths (launches too: one encoding for all)."""
        values = [*dataclasses.astuple(times), process_cpu_s]
        self.header[_ENGINE_TIMES:_ENGINE_TIMES + len(values)] = [round(v * 1e6) for v in values]

    def engine_times(self) -> tuple[LauncherTimes | None, float]:
        """(the launcher's times, None before the first served batch; the engine process's CPU seconds)."""
        names = [f.name for f in dataclasses.fields(LauncherTimes)]
        *values, process = (float(v) / 1e6 for v in self.header[_ENGINE_TIMES:_ENGINE_TIMES + len(names) + 1])
        times = LauncherTimes(**dict(zip(names, values, strict=True)))
        times.launches = round(times.launches)
        return (times if times.launches else None), process

    def count_request(self, status: int, frontend: int = 0) -> None:
        row = _COUNTERS + frontend * (len(COUNTED_STATUSES) + 1)
        index = COUNTED_STATUSES.index(status) if status in COUNTED_STATUSES else len(COUNTED_STATUSES)
        self.header[row + index] += 1

    def request_counts(self) -> dict[str, int]:
        width = len(COUNTED_STATUSES) + 1
        rows = self.header[_COUNTERS:_COUNTERS + MAX_FRONTENDS * width].reshape(MAX_FRONTENDS, width).sum(axis=0)
        names = [str(s) for s in COUNTED_STATUSES] + ["other"]
        return {name: int(count) for name, count in zip(names, rows) if count}


assert _COUNTERS + MAX_FRONTENDS * (len(COUNTED_STATUSES) + 1) <= _ENGINE_TIMES, "ring header fields overlap"
assert _ENGINE_TIMES + len(dataclasses.fields(LauncherTimes)) + 1 <= _MESSAGE, "ring header fields overlap"


def die_with_parent(sig: int = 15) -> None:
    """Have the kernel send this process ``sig`` (default SIGTERM) when its parent (the supervisor) dies,
    however it dies: an engine or front end never outlives the server (Linux prctl PR_SET_PDEATHSIG;
    elsewhere a no-op)."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(sig), 0, 0, 0)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
