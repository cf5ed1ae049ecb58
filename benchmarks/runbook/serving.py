"""`cnnbench serve` over HTTP with `cnnbench load` on the same host: the HTTP stack alone (a model that
takes no time: one process with the httptools and the h11 parser, then the default front ends), then
PyTorch eager, PyTorch with CUDA graphs and JAX: the engine and the in-process batcher without HTTP
(serve_pipeline.py), dynamic batching at 100, 3,000 and 14,000 req/s raw and 8,000 JPEG at saturation, and
the plain route (one forward per request)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

from cnnbench.serve.config import default_frontends
from runbook.steps import ROOT, SMOKE_MODEL, Context, stop_group

SERVE_SPEC = "experiments/resnet50_serve.toml"
SMOKE_SERVE = {**SMOKE_MODEL, "serve.max_batch": 8, "serve.pad_multiple": 4, "serve.max_queue": 64,
               "serve.decode_workers": 2}


@dataclass(frozen=True)
class Load:
    """Offered rates (req/s) and the load's shape on this machine."""
    low: int
    mid: int
    high: int
    jpeg: int
    plain_high: int
    seconds: int
    low_seconds: int  # the low rate's p99 is a latency claim: 1,000 answers at 100 req/s, not 300
    max_processes: int
    shape: str


# saturation offers more than the fastest engine answers (CUDA graphs: 11,750 img/s on the H200): at 8,000 raw
# and 4,000 JPEG req/s (until 2026-12-07) the CUDA-graphs and JAX servers answered all of it on an H100
GPU_LOAD = Load(100, 3000, 14000, 8000, 1500, 3, 10, 6, "224,224,3")
SMOKE_LOAD = Load(20, 100, 200, 100, 100, 2, 3, 1, "16,16,3")


@contextlib.contextmanager
def server(ctx: Context, name: str, cmd: list, env: dict[str, str] | None = None) -> Iterator[None]:
    """A server in its own process group for the duration of the block; SIGTERM (it drains), then SIGKILL."""
    with ctx.log.open("a") as log:
        log.write(f"\n== server {name}: {' '.join(map(str, cmd))}\n")
        log.flush()
        process = subprocess.Popen([str(c) for c in cmd], cwd=ROOT, env={**ctx.env(), **(env or {})}, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield
    finally:
        ctx.say(f"server {name}: exit {stop_group(process, 30)}")


def free_port() -> int:
    """A port nobody listens on now (the servers of one section take turns on it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def load(ctx: Context, port: int, rows: str, rate: int, kind: str, plan: Load, *extra: str) -> None:
    """One `cnnbench load` row: one client process per ~2,500 req/s, connections to match the rate (at
    100 req/s, 512 idle connections would outlive uvicorn's 5 s keep-alive and reconnect)."""
    processes = min(rate // 2500 + 1, plan.max_processes)
    connections = min(max(rate // 8, 32), 512)
    seconds = plan.low_seconds if rate <= plan.low else plan.seconds
    ctx.run(f"load {kind} {rate} req/s", [ctx.python, "-m", "cnnbench.cli", "load", f"http://127.0.0.1:{port}",
                                          "--rate", rate, "--requests", rate * seconds, "--duration",
                                          seconds, "--input", kind, "--processes", processes, "--connections",
                                          connections, "--timeout", 20, "--wait", 150, "--out", ctx.out / rows,
                                          *extra], 60)


def serving(ctx: Context) -> None:
    plan = SMOKE_LOAD if ctx.smoke else GPU_LOAD
    port = free_port()
    device = "cpu" if ctx.smoke else "gpu"
    # The HTTP stack alone: one process with uvicorn's default parser (httptools), then h11, then the default
    # front ends of the model servers below, which is the ceiling of the server around any engine.
    frontends = default_frontends() or 2  # a host under 4 cores (SMOKE) still runs the front-end path
    for name, parser, count in (("auto", "auto", 0), ("h11", "h11", 0), (f"{frontends} front ends", "auto", frontends)):
        with server(ctx, f"no-model {name}", [ctx.python, "tests/numpy_serve_engine.py", port, 0, 32, 512, 5,
                                              "dynamic", parser, count], {"NUMPY_ENGINE_SHAPE": plan.shape}):
            load(ctx, port, "h200_stack_http.csv", plan.high, "raw", plan)
    spec = ctx.spec(SERVE_SPEC, "resnet50_serve", {}, SMOKE_SERVE)
    graphs = ctx.spec(SERVE_SPEC, "resnet50_serve_graphs", {"torch.serve_cuda_graphs": True}, SMOKE_SERVE)
    for config, backend, this_spec in (("torch", "torch", spec), ("torch-graphs", "torch", graphs),
                                       ("jax", "jax", spec)):
        produced = ctx.scratch(f"pipeline_{config}.jsonl")
        ctx.run(f"{config} engine and batcher", [ctx.python, "benchmarks/serve_pipeline.py", "measure", this_spec,
                                                 backend, device, produced], 150)
        ctx.keep(produced, "h200_serve_pipeline.jsonl")
        # the plain route is the same with and without CUDA graphs: measured once
        for batching in ("dynamic",) if config == "torch-graphs" else ("dynamic", "none"):
            with server(ctx, f"{config} {batching}", [ctx.python, "-m", "cnnbench.cli", "serve", this_spec, "-b",
                                                      backend, "--device", device, "--port", port, "--batching",
                                                      batching]):
                load(ctx, port, "h200_serve_http.csv", plan.low, "raw", plan)
                if batching == "dynamic":
                    load(ctx, port, "h200_serve_http.csv", plan.mid, "raw", plan)
                    load(ctx, port, "h200_serve_http.csv", plan.high, "raw", plan)
                    load(ctx, port, "h200_serve_http.csv", plan.jpeg, "jpeg", plan, "--source-size", "500x375")
                else:
                    load(ctx, port, "h200_serve_http.csv", plan.plain_high, "raw", plan)


GIL_SWITCHES_MS = (5.0, 1.0, 0.1)  # 5: Python's own; 0.1 kept 0.98 of a host-bound engine on a CPU (batcher_gil.py)


def serving_gil(ctx: Context) -> None:
    """The GIL switch interval of the engine process (`[serve] switch_interval_ms`) in one invocation: the
    engine alone and the in-process batcher at each interval for the three engines, then `cnnbench serve`
    with its default front ends raw at saturation at each interval for the engines that launch from Python
    (eager PyTorch, JAX; a CUDA-graph launch is one replay, which the in-process rows show)."""
    plan = SMOKE_LOAD if ctx.smoke else GPU_LOAD
    port = free_port()
    device = "cpu" if ctx.smoke else "gpu"
    spec = ctx.spec(SERVE_SPEC, "resnet50_serve", {}, SMOKE_SERVE)
    graphs = ctx.spec(SERVE_SPEC, "resnet50_serve_graphs", {"torch.serve_cuda_graphs": True}, SMOKE_SERVE)
    switches = ",".join(f"{ms:g}" for ms in GIL_SWITCHES_MS)
    for config, backend, this_spec in (("torch", "torch", spec), ("torch-graphs", "torch", graphs),
                                       ("jax", "jax", spec)):
        produced = ctx.scratch(f"gil_{config}.jsonl")
        ctx.run(f"{config} engine and batcher at switch intervals {switches} ms",
                [ctx.python, "benchmarks/serve_pipeline.py", "measure", this_spec, backend, device, produced, switches],
                150)
        ctx.keep(produced, "h200_serve_gil.jsonl")
        if config == "torch-graphs":
            continue
        for switch_ms in GIL_SWITCHES_MS:
            with server(ctx, f"{config} switch {switch_ms:g} ms",
                        [ctx.python, "-m", "cnnbench.cli", "serve", this_spec, "-b", backend, "--device", device,
                         "--port", port, "--switch-interval-ms", switch_ms]):
                load(ctx, port, "h200_serve_gil_http.csv", plan.high, "raw", plan)
