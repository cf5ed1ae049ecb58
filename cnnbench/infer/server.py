"""`cnnbench serve`: one model behind HTTP, Starlette on uvicorn, one backend per process.

Routes: ``POST /v1/infer`` (a JPEG/PNG body, or a raw uint8 tensor with ``X-Tensor-Shape: H,W,C`` and
``X-Tensor-Dtype: uint8``) -> ``{"classes": [...], "scores": [...]}``; ``GET /healthz`` (200 only once
every batch shape is warmed up); ``GET /metrics`` (Prometheus text); ``GET /v1/info`` (the model, the
settings and the CSV row fields that `cnnbench load` completes).

The event loop does no heavy work: image decoding runs in a thread pool (OpenCV releases the GIL) that
also copies the decoded image into its staging slot; the batcher's own threads launch and answer
batches (:mod:`cnnbench.infer.batcher`). With ``batching = "none"`` each request instead makes one
synchronous forward pass in a pool thread: the route-calls-the-model pattern, for comparison.
Every bad request gets a 4xx with a one-line JSON error and the server goes on serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from cnnbench.errors import UserError
from cnnbench.infer.batcher import Closed, PipelinedBatcher, QueueFull, ServeEngine, batch_shapes
from cnnbench.infer.images import BadInput, decode_image, raw_tensor

BATCHING_MODES = ("dynamic", "none")
HTTP_PARSERS = ("auto", "h11", "httptools")
IMAGE_TYPES = ("image/jpeg", "image/png", "application/octet-stream")


@dataclass(frozen=True)
class ServeConfig:
    """What the server does; from the spec's ``[serve]`` table, each field overridable on the CLI."""

    host: str = "127.0.0.1"
    port: int = 8000
    max_batch: int = 32
    deadline_ms: float = 5.0  # a batch is launched when its oldest request has waited this long
    max_queue: int = 256  # requests waiting for the device; past it, 503 with Retry-After
    max_body_bytes: int = 8 * 2**20
    decode_workers: int = 4
    pad_multiple: int = 8
    top_k: int = 5
    batching: str = "dynamic"
    http: str = "auto"  # uvicorn's HTTP parser: httptools where installed (auto), else the pure-Python h11

    def __post_init__(self) -> None:
        for name in ("max_batch", "max_queue", "max_body_bytes", "decode_workers", "pad_multiple", "top_k"):
            if getattr(self, name) < 1:
                raise UserError(f"serve: {name} must be >= 1, found {getattr(self, name)}")
        if not 0 <= self.port <= 65535:
            raise UserError(f"serve: port must be 0..65535, found {self.port}")
        if self.deadline_ms < 0:
            raise UserError(f"serve: deadline_ms must be >= 0, found {self.deadline_ms}")
        if self.http not in HTTP_PARSERS:
            raise UserError(f"serve: http must be one of {', '.join(HTTP_PARSERS)}, found {self.http!r}")
        if self.batching not in BATCHING_MODES:
            raise UserError(f"serve: batching must be one of {', '.join(BATCHING_MODES)}, found {self.batching!r}")


class _Metrics:
    """The Prometheus series, in a registry of their own (not the process-global one)."""

    def __init__(self, max_batch: int, depth: Callable[[], float]) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        self.requests = Counter("cnnbench_requests", "Answers of /v1/infer by HTTP status.", ["status"],
                                registry=self.registry)
        self.latency = Histogram("cnnbench_request_latency_seconds", "/v1/infer, request received to answer.",
                                 buckets=(.001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5, 10),
                                 registry=self.registry)
        sizes = sorted({2**i for i in range(max_batch.bit_length())} | {max_batch})
        self.batch_size = Histogram("cnnbench_batch_size", "Requests per launched batch.", buckets=sizes,
                                    registry=self.registry)
        self.batch_seconds = Histogram("cnnbench_batch_seconds", "A batch's launch to its results on the host.",
                                       buckets=(.001, .002, .005, .01, .02, .05, .1, .2, .5, 1),
                                       registry=self.registry)
        Gauge("cnnbench_queue_depth", "Requests admitted and not yet launched.",
              registry=self.registry).set_function(depth)

    def on_batch(self, size: int, seconds: float) -> None:
        self.batch_size.observe(size)
        self.batch_seconds.observe(seconds)

    def text(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class _BodyTooLarge(Exception):
    pass


async def _read_body(request: Any, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise _BodyTooLarge(f"body of {int(declared)} bytes is over the limit of {limit} (max_body_bytes)")
    parts, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _BodyTooLarge(f"body is over the limit of {limit} bytes (max_body_bytes)")
        parts.append(chunk)
    return b"".join(parts)


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
        self.metrics = _Metrics(config.max_batch, self._depth)
        self.on_failure: Callable[[], None] = lambda: None

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
                self.batcher = PipelinedBatcher(self.engine, self.config.max_batch, self.config.deadline_ms,
                                                self.config.max_queue)
            self._warm_up()
            if self.batcher is not None:  # the batch metrics count served batches, not warm-up ones
                self.batcher.on_batch = self.metrics.on_batch
            if self.wrap_engine is not None:  # fault injection counts batches served, not warm-up ones
                self.wrap_engine(self.engine)
            self.info["device_name"] = self.engine.device_name()
            self.info["row"]["device_name"] = self.engine.device_name()
            self.info["warmup_s"] = time.perf_counter() - began
            self.ready.set()
            print(f"cnnbench serve: ready on http://{self.config.host}:{self.config.port} "
                  f"({self.info['row']['backend']} {self.info['row']['model']}, {self.info['device_name']}, "
                  f"warm-up {self.info['warmup_s']:.1f} s, HTTP parser {self.info.get('http_parser')})",
                  file=sys.stderr, flush=True)
        except BaseException as exc:  # noqa: BLE001 - the server must stop, saying why
            self.failure = f"{type(exc).__name__}: {exc}".strip()
            print(f"cnnbench serve: model failed to load: {self.failure}", file=sys.stderr, flush=True)
            self.on_failure()

    def _warm_up(self) -> None:
        """Every batch shape the server can run, twice, in the threads that will run it: compilation,
        autotuning and per-thread library handles (cuDNN, cuBLAS) are set up on first use."""
        image = np.zeros(self.engine.image_shape, np.uint8)
        if self.batcher is None:
            barrier = threading.Barrier(self.config.decode_workers)

            def once() -> None:
                barrier.wait()  # one call in every pool thread
                for _ in range(2):
                    self.engine.infer_now(image[None])

            for future in [self.pool.submit(once) for _ in range(self.config.decode_workers)]:
                future.result()
            return
        for size in batch_shapes(self.config.max_batch, self.engine.pad_multiple):
            for _ in range(2):
                for future in [self.batcher.submit(image) for _ in range(size)]:
                    future.result()

    def close(self) -> None:
        if self.batcher is not None:
            self.batcher.close()
        self.pool.shutdown(wait=True)

    # -- one request -----------------------------------------------------------------------------

    def _image(self, body: bytes, headers: Any) -> np.ndarray:
        shape = headers.get("x-tensor-shape")
        if shape is not None:
            return raw_tensor(body, shape, headers.get("x-tensor-dtype", "uint8"), self.engine.image_shape)
        height, width, channels = self.engine.image_shape
        return decode_image(body, (height, width), channels)

    def _decode_and_submit(self, body: bytes, headers: Any) -> Future:
        return self.batcher.submit(self._image(body, headers))

    def _decode_and_infer(self, body: bytes, headers: Any) -> tuple[np.ndarray, np.ndarray]:
        ids, scores = self.engine.infer_now(self._image(body, headers)[None])
        return ids[0], scores[0]

    async def answer(self, body: bytes, headers: Any) -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON) for one /v1/infer body."""
        loop = asyncio.get_running_loop()
        try:
            if self.batcher is None:
                if self.outstanding >= self.config.max_queue:
                    raise QueueFull(f"{self.outstanding} requests are waiting (max_queue {self.config.max_queue})")
                self.outstanding += 1
                try:
                    ids, scores = await loop.run_in_executor(self.pool, self._decode_and_infer, body, headers)
                finally:
                    self.outstanding -= 1
            else:
                if "x-tensor-shape" in headers:  # a memcpy into the slot: not worth a thread hop
                    future = self.batcher.submit(self._image(body, headers))
                else:
                    future = await loop.run_in_executor(self.pool, self._decode_and_submit, body, headers)
                ids, scores = await asyncio.wrap_future(future)
        except BadInput as exc:
            return 400, {"error": str(exc)}
        except (QueueFull, Closed) as exc:
            return 503, {"error": str(exc)}
        except Exception as exc:  # noqa: BLE001 - the model call failed: this request (its batch) only
            return 500, {"error": f"model call failed: {type(exc).__name__}: {exc}"}
        return 200, {"classes": ids.tolist(), "scores": [round(float(s), 6) for s in scores]}


def build_app(service: InferenceService) -> Any:
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    def error(status: int, message: str) -> Any:
        headers = {"Retry-After": "1"} if status == 503 else None
        return JSONResponse({"error": " ".join(message.split())}, status_code=status, headers=headers)

    async def infer(request: Any) -> Any:
        began = time.perf_counter()
        if not service.ready.is_set():
            response = error(503, service.failure or "warming up: every batch shape is compiled before serving")
        else:
            content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
            try:
                body = await _read_body(request, service.config.max_body_bytes)
            except _BodyTooLarge as exc:
                response = error(413, str(exc))
            else:
                if not body:
                    response = error(400, "empty body: expected JPEG/PNG bytes or a raw uint8 tensor")
                elif content_type and content_type not in IMAGE_TYPES and "x-tensor-shape" not in request.headers:
                    response = error(415, f"content type {content_type!r}: expected one of {', '.join(IMAGE_TYPES)}")
                else:
                    status, payload = await service.answer(body, request.headers)
                    response = (JSONResponse(payload) if status == 200 else error(status, payload["error"]))
        service.metrics.requests.labels(str(response.status_code)).inc()
        service.metrics.latency.observe(time.perf_counter() - began)
        return response

    async def healthz(request: Any) -> Any:
        if service.ready.is_set():
            return JSONResponse({"status": "ready"})
        return JSONResponse({"status": "failed" if service.failure else "warming", "error": service.failure},
                            status_code=503)

    async def metrics(request: Any) -> Any:
        body, media_type = service.metrics.text()
        return Response(body, media_type=media_type)

    async def info(request: Any) -> Any:
        return JSONResponse(service.info)

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        service.start()
        yield
        # uvicorn has stopped accepting and waited for the requests in progress; drain the rest.
        await asyncio.get_running_loop().run_in_executor(None, service.close)

    return Starlette(routes=[Route("/v1/infer", infer, methods=["POST"]), Route("/healthz", healthz),
                             Route("/metrics", metrics), Route("/v1/info", info)], lifespan=lifespan)


def run_server(service: InferenceService) -> int:
    """Serve until SIGTERM/SIGINT: stop accepting, finish what is queued, return 0 (1 if the model
    never loaded)."""
    import uvicorn

    class GracefulServer(uvicorn.Server):
        # uvicorn re-raises a captured SIGTERM after its graceful shutdown, which would turn a clean
        # drain into death by signal; take the signal as the request to stop, and stop.
        @contextlib.contextmanager
        def capture_signals(self):  # type: ignore[override]
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    config = service.config
    settings = uvicorn.Config(build_app(service), host=config.host, port=config.port, http=config.http,
                              log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=60)
    server = GracefulServer(settings)
    settings.load()
    service.info["http_parser"] = settings.http_protocol_class.__module__.rsplit(".", 1)[-1]  # e.g. h11_impl
    service.on_failure = lambda: setattr(server, "should_exit", True)
    server.run()
    return 1 if service.failure else 0


def serve_config(table: Any, overrides: dict[str, Any] | None = None) -> ServeConfig:
    """The server's settings: the spec's ``[serve]`` table, then the command line's overrides (None: unset)."""
    import dataclasses

    fields = {f.name for f in dataclasses.fields(ServeConfig)}
    settings = {name: getattr(table, name) for name in fields if hasattr(table, name)}
    settings["deadline_ms"] = table.timeout_ms
    settings.update({k: v for k, v in (overrides or {}).items() if v is not None})
    return ServeConfig(**settings)


def warmed_batch_shapes(config: ServeConfig) -> list[int]:
    """The batch sizes the server runs (and warms up before /healthz says ready): with batching none,
    one image per forward."""
    return batch_shapes(config.max_batch, config.pad_multiple) if config.batching != "none" else [1]


def serve_spec(spec: Any, backend: str | None, device_kind: str | None, overrides: dict[str, Any]) -> int:
    """`cnnbench serve`: the spec's model in this process, with ``[serve]`` settings and CLI overrides."""
    import dataclasses
    import os

    import backends as registry
    from cnnbench.infer.plan import serve_run
    from cnnbench.run import faults
    from cnnbench.table.rows import serve_http_row

    names = [backend] if backend else list(spec.backends)
    if len(names) != 1:
        raise UserError(f"serve: one backend per server process; the spec lists {', '.join(names)}: pass --backend")
    config = serve_config(spec.serve, overrides)
    if config.batching != spec.serve.batching:
        spec = dataclasses.replace(spec, serve=dataclasses.replace(spec.serve, batching=config.batching))
    run, variant = serve_run(spec, names[0], device_kind)
    module = registry.load(run.backend)
    if run.device_kind == "cpu":
        # Intra-op threads of a CPU model fight the server's own threads (event loop, decoders, batcher)
        # for the cores: with all cores they made a 2-core machine 20x slower at low load.
        os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) - config.decode_workers - 1)))
    # Set before the framework is imported (it is, lazily, in the loader thread): e.g. a CPU run hides
    # the GPUs, JAX gets its platform.
    for key, value in module.launch_layout(run).env.items():
        os.environ.setdefault(key, value)
    info = {"config": dataclasses.asdict(config), "image_shape": [*run.image_size, run.channels],
            "row": serve_http_row(run, variant, dataclasses.asdict(config))}
    service = InferenceService(config, lambda: module.build_serve_engine(run, variant, config.top_k,
                                                                         config.pad_multiple),
                               info, wrap_engine=faults.install_on_engine)
    return run_server(service)
