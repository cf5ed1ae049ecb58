"""The `cnnbench serve` and `cnnbench load` commands (registered on the app in :mod:`cnnbench.cli`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from cnnbench.cli_options import DeviceOpt, check_device


def _default_frontends() -> int:
    from cnnbench.serve.config import default_frontends

    return default_frontends()


def serve(
    spec: Annotated[Path, typer.Argument(help="Experiment TOML: the model, precision, [serve] settings.")],
    backend: Annotated[Optional[str], typer.Option(
        "--backend", "-b", help="torch, jax or tensorflow (one per process).")] = None,
    device: DeviceOpt = None,
    host: Annotated[Optional[str], typer.Option(help="Address to bind (default: [serve] host, 127.0.0.1).")] = None,
    port: Annotated[Optional[int], typer.Option(help="TCP port (0: any free one).")] = None,
    max_batch: Annotated[Optional[int], typer.Option(help="Largest batch the batcher launches.")] = None,
    deadline_ms: Annotated[Optional[float], typer.Option(
        help="Launch a batch when its oldest request has waited this long.")] = None,
    max_queue: Annotated[Optional[int], typer.Option(help="Requests waiting at most; past it 503.")] = None,
    max_body_bytes: Annotated[Optional[int], typer.Option(help="Larger bodies get 413.")] = None,
    decode_workers: Annotated[Optional[int], typer.Option(help="Image-decoding threads.")] = None,
    copy_threads: Annotated[Optional[int], typer.Option(help=(
        "Threads copying one request's pixels into its batch slot; 0: 4 for images of 1 MiB or more, "
        "else 1."))] = None,
    batching: Annotated[Optional[str], typer.Option(
        help="dynamic (pipelined batcher) or none (one forward per request).")] = None,
    top_k: Annotated[Optional[int], typer.Option(help="Classes in each answer.")] = None,
    http: Annotated[Optional[str], typer.Option(help="uvicorn's HTTP parser: auto, h11 or httptools.")] = None,
    frontends: Annotated[Optional[int], typer.Option(help=(
        "HTTP front-end processes feeding one engine process through shared memory; 0: one process "
        "does both. Default: [serve] frontends, else from the host's cores: 0 below 4 cores, else "
        f"(cores - 2) // 2 up to 8 ({_default_frontends()} here)."))] = None,
    max_pixels: Annotated[Optional[int], typer.Option(
        help="JPEG/PNG bodies whose header says more pixels are refused before decoding.")] = None,
    listen: Annotated[Optional[str], typer.Option(
        help="With front ends: reuseport (a socket each) or shared (one socket).")] = None,
    switch_interval_ms: Annotated[Optional[float], typer.Option(help=(
        "GIL switch interval of the process running the engine, ms; 0: Python's own (5 ms)."))] = None,
    stop_timeout_s: Annotated[Optional[float], typer.Option(help=(
        "With front ends: each stage of a stop waits this long; a process still running then prints its "
        "threads' stacks and is killed. Default 60."))] = None,
) -> None:
    """Serve the spec's model over HTTP: POST /v1/infer, the Open Inference Protocol under /v2, GET /healthz,
    /metrics, /v1/info (SIGTERM drains)."""
    from cnnbench.process_exit import leave
    from cnnbench.serve.command import serve_spec
    from cnnbench.spec import load_spec

    check_device(device)
    overrides = {"host": host, "port": port, "max_batch": max_batch, "deadline_ms": deadline_ms,
                 "max_queue": max_queue, "max_body_bytes": max_body_bytes, "decode_workers": decode_workers,
                 "copy_threads": copy_threads, "batching": batching, "top_k": top_k, "http": http,
                 "frontends": frontends, "max_pixels": max_pixels, "listen": listen,
                 "switch_interval_ms": switch_interval_ms, "stop_timeout_s": stop_timeout_s}
    code = serve_spec(load_spec(spec), backend, device, overrides)
    leave(code)  # the server has stopped; no framework's exit handler may hold the process (see leave)


def load(
    url: Annotated[str, typer.Argument(help="The server, e.g. http://127.0.0.1:8000 (loopback only).")],
    rate: Annotated[list[float], typer.Option("--rate", "-r", help="Offered load, requests/s (repeatable).")],
    requests: Annotated[int, typer.Option(min=1, help="Requests per rate, at most.")] = 1000,
    duration: Annotated[float, typer.Option(min=0.1, help="Arrivals at each rate end after this many s.")] = 10.0,
    input: Annotated[str, typer.Option("--input", help="raw (uint8 tensor), jpeg or png.")] = "raw",
    source_size: Annotated[Optional[str], typer.Option(
        help="jpeg/png: picture size WxH before the server resizes it (default the model's).")] = None,
    processes: Annotated[int, typer.Option(min=0, help=(
        "Client processes sharing the rate; 0: one per 2,000 req/s offered, at most half this host's "
        f"cores ({max(1, (os.cpu_count() or 1) // 2)} here)."))] = 0,
    connections: Annotated[int, typer.Option(min=1, help="HTTP connections, all processes together.")] = 256,
    timeout: Annotated[float, typer.Option(min=0.1, help="Per-request limit, s.")] = 30.0,
    wait: Annotated[float, typer.Option(min=0.0, help="Wait this long for /healthz to say ready, s.")] = 600.0,
    seed: Annotated[int, typer.Option(min=0)] = 0,
    out: Annotated[Path, typer.Option(help="Results CSV to append to.")] = Path("results") / "serve_http.csv",
) -> None:
    """Open-loop Poisson load over HTTP against `cnnbench serve`; one `serve-http` row per rate."""
    from cnnbench.serve.load import run_load

    rows = run_load(url, rate, requests, duration, input, source_size, processes, connections, timeout, wait,
                    seed, out)
    if any(r["status"] == "failed" for r in rows):
        raise typer.Exit(1)
