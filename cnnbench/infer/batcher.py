"""The pipelined dynamic batcher behind `cnnbench serve`; no framework in here.

The in-process :class:`~cnnbench.infer.micro_batcher.MicroBatcher` stacks, pads and copies a batch at
flush time, then computes, then answers, all in one thread. Here every stage overlaps the others:

- ``submit`` copies the request's uint8 HWC image straight into a free slot of a preallocated
  staging buffer (pinned memory on a GPU), in the caller's thread, as the request arrives; nothing is
  stacked at flush time. An image of ``LARGE_IMAGE_BYTES`` or more (a 1080p frame is 6.2 MB) is copied
  in row bands by ``copy_threads`` threads: one thread copies about 10 GB/s, 1,600 frames/s, and the
  engine of the multi-process server makes every copy in its one receiving thread.
- One *launcher* thread closes a batch when it is full or when its oldest request has waited
  ``deadline_ms``, and hands it to :meth:`ServeEngine.launch`, which starts the host-to-device copy and
  the forward pass and returns at once (a copy stream + events in PyTorch, asynchronous dispatch in
  JAX). With ``in_flight = 2``, batch n+1's copy runs while batch n computes.
- One *completer* thread waits for each launched batch's top-k results and answers its requests, so
  the replies never hold up the next launch.

The queue is bounded: past ``max_queue`` requests waiting for the device, ``submit`` raises
:class:`QueueFull` (the server answers 503 with Retry-After). Enough staging buffers are made up
front that an admitted request always finds a slot.
"""

from __future__ import annotations

import collections
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cnnbench.backend import ServeEngine

LARGE_IMAGE_BYTES = 2**20  # from here on an image is copied into its slot by several threads
AUTO_COPY_THREADS = 4


def copy_threads_for(image_shape: tuple[int, ...], requested: int = 0) -> int:
    """The copy threads of a batcher: ``requested``, or (0) 4 for images of LARGE_IMAGE_BYTES or more and
    1 below, where a thread pool's hand-over would cost more than the copy (150 KB at 224x224)."""
    if requested:
        return requested
    return AUTO_COPY_THREADS if math.prod(image_shape) >= LARGE_IMAGE_BYTES else 1


def padded_size(valid: int, multiple: int, cap: int) -> int:
    """The batch size a launch of ``valid`` images runs: up to a multiple, at most ``cap``."""
    return min(math.ceil(valid / max(multiple, 1)) * max(multiple, 1), cap)


def batch_shapes(max_batch: int, multiple: int) -> list[int]:
    """Every padded batch size a batcher of ``max_batch`` can launch (all warmed up before ready)."""
    return sorted({padded_size(n, multiple, max_batch) for n in range(1, max_batch + 1)})


class QueueFull(RuntimeError):
    """More than ``max_queue`` requests are waiting for the device."""


class Closed(RuntimeError):
    """The batcher is shutting down and takes no new requests."""


@dataclass
class LauncherTimes:
    """Where the launcher thread's time went, in seconds since the batcher started: in ``engine.launch``
    (the host side of a launch: for an eager engine, its Python), idle with no request waiting, idle while
    the first batch fills up to its deadline, and idle with a batch ready but ``in_flight`` batches on the
    device. Compared with the engine's launch alone, it says whether the batcher's other threads slow the
    launches down, starve them of requests, or wait for the device. ``launching_cpu_s`` is the launcher
    thread's own CPU time inside ``engine.launch``: the rest of ``launching_s`` it was not running (waiting
    for the GIL, for a core, or blocked in a call), which separates a launch stretched by waiting from one
    whose own work got slower (shared cores and caches)."""

    launching_s: float = 0.0
    launching_cpu_s: float = 0.0
    launches: int = 0
    no_request_s: float = 0.0
    filling_s: float = 0.0
    device_full_s: float = 0.0


@dataclass
class _Batch:
    index: int  # which staging buffer
    opened: float  # arrival of its first request: the deadline counts from here
    futures: list[Future] = field(default_factory=list)  # one per reserved slot, in slot order
    filled: int = 0  # slots whose copy has finished (a copy happens outside the lock)
    failed: dict[int, BaseException] = field(default_factory=dict)
    awaited: bool = False  # the launcher has taken it and waits for its last copies to finish


class PipelinedBatcher:
    """Dynamic batching into staging slots, launched and answered by two threads."""

    def __init__(self, engine: ServeEngine, max_batch: int, deadline_ms: float, max_queue: int,
                 in_flight: int = 2, on_batch: Callable[[int, float], None] | None = None,
                 copy_threads: int = 1) -> None:
        if max_batch < 1 or deadline_ms < 0 or max_queue < 1 or in_flight < 1 or copy_threads < 1:
            raise ValueError(f"max_batch, max_queue, in_flight and copy_threads must be >= 1 and deadline_ms >= 0, "
                             f"found {max_batch}, {max_queue}, {in_flight}, {copy_threads}, {deadline_ms}")
        self.engine, self.max_batch, self.max_queue = engine, max_batch, max_queue
        self.deadline_s, self.in_flight_limit = deadline_ms / 1000.0, in_flight
        self.on_batch = on_batch  # (valid images, seconds from launch to results) per batch
        # Waiting batches hold at most max_queue requests, all but the newest full; add the ones in flight
        # and the one the completer is answering.
        count = math.ceil(max_queue / max_batch) + in_flight + 1
        self.buffers = engine.staging_buffers(count, max_batch)
        self._free = list(range(count))
        self._waiting: collections.deque[_Batch] = collections.deque()
        self._launched: collections.deque[tuple[_Batch, Any, float] | None] = collections.deque()
        self._cond = threading.Condition()
        self._done_cond = threading.Condition()
        self.depth = 0  # requests admitted and not yet launched
        self._in_flight = 0
        self._closing = False
        self.launcher_times = LauncherTimes()  # written by the launcher thread only
        # the caller copies one band itself, the pool the others (numpy releases the GIL while it copies)
        self.copy_threads = copy_threads
        self._copier = (ThreadPoolExecutor(copy_threads - 1, thread_name_prefix="batch-copy")
                        if copy_threads > 1 else None)
        self._launcher = threading.Thread(target=self._launch_loop, name="batch-launcher", daemon=True)
        self._completer = threading.Thread(target=self._complete_loop, name="batch-completer", daemon=True)
        self._launcher.start()
        self._completer.start()

    # -- callers ---------------------------------------------------------------------------------

    def submit(self, image: np.ndarray, arrived: float | None = None) -> Future:
        """Copy one (H, W, C) uint8 image into a slot; the future gets (class ids, probabilities).
        ``arrived`` (time.perf_counter, system-wide on Linux): when the request reached the server, if
        before now (another process took it in); a batch's deadline counts from its first request's."""
        with self._cond:
            if self._closing:
                raise Closed("the server is shutting down")
            if self.depth >= self.max_queue:
                raise QueueFull(f"{self.depth} requests are waiting (max_queue {self.max_queue})")
            batch = self._waiting[-1] if self._waiting and len(self._waiting[-1].futures) < self.max_batch else None
            if batch is None:
                while not self._free:  # not reached with the buffer count above; never overwrite a slot
                    self._cond.wait()
                batch = _Batch(self._free.pop(), time.perf_counter() if arrived is None else arrived)
                self._waiting.append(batch)
            slot, future = len(batch.futures), Future()
            batch.futures.append(future)
            self.depth += 1
            if slot == 0 or len(batch.futures) == self.max_batch:
                self._cond.notify_all()  # a new deadline to wait for, or a full batch to launch
        try:
            self._copy(self.buffers[batch.index][slot], image)
        except BaseException as exc:  # noqa: BLE001 - a bad copy fails this request only
            batch.failed[slot] = exc
        finally:
            with self._cond:
                batch.filled += 1
                # only the launcher waiting for this batch's last copy needs waking: a wake-up per request
                # would cost the launcher a thread switch and the GIL each time it waits for a batch to fill
                if batch.awaited and batch.filled == len(batch.futures):
                    self._cond.notify_all()
        return future

    def _copy(self, target: np.ndarray, image: np.ndarray) -> None:
        """``target[...] = image``; a large image in row bands, one per copy thread."""
        if self._copier is None or image.nbytes < LARGE_IMAGE_BYTES or image.shape != target.shape:
            target[...] = image  # a wrong shape raises here, as it does for a small image
            return
        bounds = np.linspace(0, image.shape[0], self.copy_threads + 1).astype(int)
        bands = list(zip(bounds[:-1], bounds[1:], strict=True))
        others = [self._copier.submit(np.copyto, target[a:b], image[a:b]) for a, b in bands[1:]]
        first_a, first_b = bands[0]
        np.copyto(target[first_a:first_b], image[first_a:first_b])
        for band in others:
            band.result()

    def close(self) -> None:
        """Take no new requests; launch and answer every waiting one at once, then stop."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._launcher.join()
        with self._done_cond:
            self._launched.append(None)
            self._done_cond.notify_all()
        self._completer.join()
        if self._copier is not None:
            self._copier.shutdown()

    # -- launcher --------------------------------------------------------------------------------

    def _next_batch(self) -> _Batch | None:
        """Wait for a batch that is full or past its deadline (or any, when closing) and a free
        place in flight; None when closing and nothing waits."""
        times = self.launcher_times
        with self._cond:
            while True:
                idle_from = time.perf_counter()
                if self._waiting and self._in_flight < self.in_flight_limit:
                    head = self._waiting[0]
                    remaining = head.opened + self.deadline_s - idle_from
                    if len(head.futures) >= self.max_batch or remaining <= 0 or self._closing:
                        break
                    self._cond.wait(remaining)
                    times.filling_s += time.perf_counter() - idle_from
                elif self._closing and not self._waiting:
                    return None
                elif self._waiting:
                    self._cond.wait()
                    times.device_full_s += time.perf_counter() - idle_from
                else:
                    self._cond.wait()
                    times.no_request_s += time.perf_counter() - idle_from
            self._waiting.popleft()
            self.depth -= len(head.futures)
            head.awaited = True  # from here its last copy wakes this thread (under the same lock: none is lost)
            while head.filled < len(head.futures):  # a caller is still copying into its slot
                self._cond.wait()
            self._in_flight += 1
            return head

    def _launch_loop(self) -> None:
        while (batch := self._next_batch()) is not None:
            begun, begun_cpu = time.perf_counter(), time.thread_time()
            try:
                handle = self.engine.launch(batch.index, len(batch.futures))
            except BaseException as exc:  # noqa: BLE001 - the batch fails, the server goes on
                self._finish(batch, None, exc, begun)
                continue
            finally:
                self.launcher_times.launching_s += time.perf_counter() - begun
                self.launcher_times.launching_cpu_s += time.thread_time() - begun_cpu
                self.launcher_times.launches += 1
            with self._done_cond:
                self._launched.append((batch, handle, begun))
                self._done_cond.notify_all()

    # -- completer -------------------------------------------------------------------------------

    def _complete_loop(self) -> None:
        while True:
            with self._done_cond:
                while not self._launched:
                    self._done_cond.wait()
                item = self._launched.popleft()
            if item is None:
                return
            batch, handle, begun = item
            try:
                result, error = self.engine.collect(handle), None
            except BaseException as exc:  # noqa: BLE001 - e.g. an asynchronous device error
                result, error = None, exc
            self._finish(batch, result, error, begun)

    def _finish(self, batch: _Batch, result: tuple[np.ndarray, np.ndarray] | None,
                error: BaseException | None, begun: float) -> None:
        seconds = time.perf_counter() - begun
        with self._cond:  # the buffer is free again once its results are on the host
            self._free.append(batch.index)
            self._in_flight -= 1
            self._cond.notify_all()
        if self.on_batch is not None:
            self.on_batch(len(batch.futures), seconds)
        for slot, future in enumerate(batch.futures):
            if error is not None:
                future.set_exception(error)
            elif slot in batch.failed:
                future.set_exception(batch.failed[slot])
            else:
                future.set_result((result[0][slot], result[1][slot]))
