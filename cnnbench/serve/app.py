"""`cnnbench serve`'s HTTP face: the routes (Starlette) and the uvicorn server of one process.

Routes: ``POST /v1/infer`` (a JPEG/PNG body, or a raw uint8 tensor with ``X-Tensor-Shape: H,W,C`` and
``X-Tensor-Dtype: uint8``) -> ``{"classes": [...], "scores": [...]}``; ``GET /healthz`` (200 only once
every batch shape is warmed up); ``GET /metrics`` (Prometheus text); ``GET /v1/info`` (the model, the
settings and the CSV row fields that `cnnbench load` completes); the Open Inference Protocol under
``/v2`` (:mod:`cnnbench.serve.v2`). The same app runs in the single-process server (over
:class:`~cnnbench.serve.service.InferenceService`) and in every front end of the multi-process one (over
:class:`~cnnbench.serve.frontend.RingService`). Every bad request gets a 4xx with a one-line JSON error
(:mod:`cnnbench.serve.limits` for the connection-level ones) and the server goes on serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

from cnnbench.infer.batcher import QueueFull
from cnnbench.infer.images import BadInput
from cnnbench.serve.answers import admitted, error_response, image_of, infer_status
from cnnbench.serve.config import IMAGE_TYPES
from cnnbench.serve.limits import ClientGone, RequestRefused, guarded_protocol, read_body


class DisconnectLog:
    """Clients gone mid-body: counted, and one line at most every ``every_s`` seconds in the log."""

    def __init__(self, every_s: float = 10.0) -> None:
        self.every_s, self.total, self.unlogged, self.logged_at = every_s, 0, 0, -float("inf")

    def record(self) -> None:
        self.total += 1
        self.unlogged += 1
        if time.monotonic() - self.logged_at >= self.every_s:
            print(f"cnnbench serve: {self.unlogged} client(s) disconnected before their body arrived "
                  f"({self.total} in all)", file=sys.stderr, flush=True)
            self.unlogged, self.logged_at = 0, time.monotonic()


def _content_type(request: Any) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


def build_app(service: Any) -> Any:
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    from cnnbench.serve import v2

    disconnects = DisconnectLog()

    async def answer_v1(request: Any) -> Any:
        if not service.ready.is_set():
            return error_response(503, service.failure or "warming up: every batch shape is compiled before serving")
        content_type = _content_type(request)
        if "x-tensor-shape" not in request.headers and content_type not in IMAGE_TYPES:
            return error_response(415, f"content type {content_type or '(none)'!r}: expected one of "
                                       f"{', '.join(IMAGE_TYPES)}, or X-Tensor-Shape for a raw tensor")
        body = await read_body(request, service.config)
        if not body:
            return error_response(400, "empty body: expected JPEG/PNG bytes or a raw uint8 tensor")
        try:
            with admitted(service):  # refused before its decode when the queue is full
                image = await image_of(service, body, request.headers)
        except BadInput as exc:
            return error_response(400, str(exc))
        except QueueFull as exc:
            return error_response(503, str(exc))
        status, result = await infer_status(service, [image])
        if status != 200:
            return error_response(status, result)
        ids, scores = result[0]
        return JSONResponse({"classes": ids.tolist(), "scores": [round(float(s), 6) for s in scores]})

    async def counted(request: Any, handler: Any) -> Any:
        """Run a request's handler; count and time its answer; turn refusals into their 4xx."""
        began = time.perf_counter()
        try:
            response = await handler(request)
        except RequestRefused as exc:
            response = error_response(exc.status, str(exc))
        except ClientGone:
            service.metrics.disconnects.inc()
            disconnects.record()
            return Response(status_code=499)  # nobody reads it: the connection is gone
        service.metrics.count(response.status_code)
        service.metrics.latency.observe(time.perf_counter() - began)
        return response

    async def infer(request: Any) -> Any:
        return await counted(request, answer_v1)

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

    routes = [Route("/v1/infer", infer, methods=["POST"]), Route("/healthz", healthz), Route("/metrics", metrics),
              Route("/v1/info", info), *v2.routes(service, counted)]
    return Starlette(routes=routes, lifespan=lifespan)


def run_server(service: Any, sockets: list[Any] | None = None, stop_signals: tuple[int, ...] | None = None) -> int:
    """Serve until one of ``stop_signals`` (default SIGTERM, SIGINT): stop accepting, finish what is
    queued, return 0 (1 if the model never loaded). ``sockets``: listening sockets made by the caller
    (front ends); otherwise uvicorn binds ``host:port``."""
    import uvicorn

    stop_signals = stop_signals or (signal.SIGINT, signal.SIGTERM)

    class GracefulServer(uvicorn.Server):
        # uvicorn re-raises a captured SIGTERM after its graceful shutdown, which would turn a clean
        # drain into death by signal; take the signal as the request to stop, and stop.
        @contextlib.contextmanager
        def capture_signals(self):  # type: ignore[override]
            for sig in stop_signals:
                signal.signal(sig, self.handle_exit)
            # a front end starts with its stop signal blocked (frontends.start_holding_signals): one sent
            # while it was starting is delivered now, to this handler, and stops it cleanly
            signal.pthread_sigmask(signal.SIG_UNBLOCK, stop_signals)
            try:
                yield
            finally:
                # The server has stopped and the process is on its way out: a later stop signal asks for
                # what is already happening. Restoring the default action instead let it kill a drained
                # process: a SIGTERM to the whole group (systemd's control-group stop, the runbook's killpg)
                # reaches each front end twice, from the sender and from the supervisor.
                for sig in stop_signals:
                    signal.signal(sig, signal.SIG_IGN)

    config = service.config
    settings = uvicorn.Config(build_app(service), host=config.host, port=config.port, http=config.http, ws="none",
                              log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=60,
                              timeout_keep_alive=config.header_timeout_s)  # type: ignore[arg-type]
    settings.load()
    service.info["http_parser"] = settings.http_protocol_class.__module__.rsplit(".", 1)[-1]  # e.g. h11_impl
    settings.http_protocol_class = guarded_protocol(settings.http_protocol_class, config)
    server = GracefulServer(settings)
    service.on_failure = lambda: setattr(server, "should_exit", True)
    server.run(sockets=sockets)
    return 1 if service.failure else 0
