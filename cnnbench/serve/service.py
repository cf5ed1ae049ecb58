"""The in-process service behind the routes of the single-process server (``frontends = 0``): the
engine, the pipelined batcher, the decode pool, readiness.

The event loop does no heavy work: image decoding runs in a thread pool (OpenCV releases the GIL); the
batcher's own threads launch and answer batches (:mod:`cnnbench.infer.batcher`). With ``batching =
"none"`` each request instead makes one synchronous forward pass in a pool thread: the
route-calls-the-model pattern, for comparison. The multi-process server's front ends use
:class:`cnnbench.serve.frontend.RingService` in its place, with the same interface.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from cnnbench.infer.batcher import PipelinedBatcher, QueueFull, ServeEngine, batch_shapes
from cnnbench.serve.config import ServeConfig
from cnnbench.serve.metrics import ServerMetrics


def warm_up(batcher: PipelinedBatcher, engine: ServeEngine, max_batch: int) -> None:
    """Every batch shape the batcher can launch, twice, in the threads that will run it: compilation,
    autotuning and per-thread library handles (cuDNN, cuBLAS) are set up on first use."""
    image = np.zeros(engine.image_shape, np.uint8)
    for size in batch_shapes(max_batch, engine.pad_multiple):
        for _ in range(2):
            for future in [batcher.submit(image) for _ in range(size)]:
                future.result()


class InferenceService:
    """The state behind the routes: the engine, the batcher, the pools, readiness."""

    def __init__(self, config: ServeConfig, build_engine: Callable[[], ServeEngine], info: dict[str, Any],
                 wrap_engine: Callable[[ServeEngine], None] | None = None) -> None:
        self.config, self.build_engine, self.info, self.wrap_engine = config, build_engine, info, wrap_engine
        self.engine: ServeEngine | None = None
        self.batcher: PipelinedBatcher | None = None
        self.pool = ThreadPoolExecutor(config.decode_workers, thread_name_prefix="decode")
        self.ready = threading.Event()
        self.failure: str | None = None
        self.outstanding = 0  # batching none: requests in the pool
        self.admitting = 0  # requests being decoded, each sure of a place in the queue (answers.admitted)
        self.metrics = ServerMetrics(config.max_batch, self._depth,
                                     launcher=lambda: self.batcher.launcher_times if self.batcher else None)
        self.on_failure: Callable[[], None] = lambda: None

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return tuple(self.info["image_shape"])  # type: ignore[return-value]

    def _depth(self) -> float:
        return float(self.batcher.depth if self.batcher else self.outstanding)

    # -- start-up --------------------------------------------------------------------------------

    def start(self) -> None:
        threading.Thread(target=self._load, name="model-loader", daemon=True).start()

    def _load(self) -> None:
        try:
            began = time.perf_counter()
            self.engine = self.build_engine()
            if self.config.batching == "dynamic":
                self.batcher = PipelinedBatcher(
                    self.engine, self.config.max_batch, self.config.deadline_ms, self.config.max_queue,
                    copy_threads=self.config.copy_threads)  # resolved by command.serve
                warm_up(self.batcher, self.engine, self.config.max_batch)
                self.batcher.on_batch = self.metrics.on_batch  # served batches only, not warm-up ones
            else:
                self._warm_up_plain()
            if self.wrap_engine is not None:  # fault injection counts batches served, not warm-up ones
                self.wrap_engine(self.engine)
            self.info["device_name"] = self.engine.device_name()
            self.info["row"]["device_name"] = self.engine.device_name()
            self.info["warmup_s"] = time.perf_counter() - began
            self.ready.set()
            print(f"cnnbench serve: ready on http://{self.config.host}:{self.info.get('port', self.config.port)} "
                  f"({self.info['row']['backend']} {self.info['row']['model']}, {self.info['device_name']}, "
                  f"warm-up {self.info['warmup_s']:.1f} s, HTTP parser {self.info.get('http_parser')})",
                  file=sys.stderr, flush=True)
        except BaseException as exc:  # noqa: BLE001 - the server must stop, saying why
            self.failure = f"{type(exc).__name__}: {exc}".strip()
            print(f"cnnbench serve: model failed to load: {self.failure}", file=sys.stderr, flush=True)
            self.on_failure()

    def _warm_up_plain(self) -> None:
        """batching none: one call in every pool thread, twice (per-thread library handles)."""
        image = np.zeros(self.engine.image_shape, np.uint8)
        barrier = threading.Barrier(self.config.decode_workers)

        def once() -> None:
            barrier.wait()
            for _ in range(2):
                self.engine.infer_now(image[None])

        for future in [self.pool.submit(once) for _ in range(self.config.decode_workers)]:
            future.result()

    def close(self) -> None:
        if self.batcher is not None:
            self.batcher.close()
        self.pool.shutdown(wait=True)

    # -- one image -------------------------------------------------------------------------------

    def refusal(self, decoding: int) -> str | None:
        """Why one more request cannot be queued beside ``decoding`` ones being decoded, or None
        (answers.admitted). The plain route has no queue to fill here (its limit counts calls in flight)."""
        if self.batcher is None or self.batcher.depth + decoding < self.config.max_queue:
            return None
        return (f"{self.batcher.depth} requests are waiting and {decoding} being decoded "
                f"(max_queue {self.config.max_queue})")

    async def infer(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(top-k class ids, probabilities) of one (H, W, C) uint8 image; raises QueueFull or Closed
        (503), or the model call's exception (500)."""
        if self.batcher is not None:
            return await asyncio.wrap_future(self.batcher.submit(image))
        if self.outstanding >= self.config.max_queue:
            raise QueueFull(f"{self.outstanding} requests are waiting (max_queue {self.config.max_queue})")
        self.outstanding += 1
        try:
            ids, scores = await asyncio.get_running_loop().run_in_executor(self.pool, self.engine.infer_now,
                                                                            image[None])
        finally:
            self.outstanding -= 1
        return ids[0], scores[0]
