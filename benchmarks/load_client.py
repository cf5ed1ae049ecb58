"""What one `cnnbench load` client process can offer, beside a plain httpx client, in one invocation.

Serves the no-model engine of tests/numpy_serve_engine.py (the real server: Starlette on uvicorn and
the pipelined batcher, a model that takes no time) on a loopback port, then offers each rate twice with
the same Poisson arrivals and raw uint8 bodies of the model's size: once with cnnbench's client
(cnnbench.serve.loadgen.offer_load, one process) and once with the plain httpx pattern (an AsyncClient,
one task per request, a semaphore for the connections). A client that is the bound shows as client lag
(requests sent late) and as latency the server did not cause.

Usage: python benchmarks/load_client.py [--rates 200 1000 2000 3000] [--seconds 4] [--shape 224,224,3]
Prints one JSON line per (client, rate).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cnnbench.infer.micro_batcher import poisson_arrivals  # noqa: E402
from cnnbench.serve.load import wait_ready  # noqa: E402
from cnnbench.serve.loadgen import offer_load, request_bodies  # noqa: E402


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def _httpx_offer(url: str, bodies, rate: float, requests: int, seconds: float, connections: int):
    """The plain pattern: one asyncio task per request through one httpx.AsyncClient."""
    import httpx

    offsets = poisson_arrivals(rate, requests, seconds, 0)
    free = asyncio.Semaphore(connections)
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    async with httpx.AsyncClient(limits=limits, timeout=20.0) as client:
        start = time.monotonic() + 0.05

        async def one(index: int, scheduled: float):
            body, headers = bodies[index % len(bodies)]
            async with free:
                sent = time.monotonic()
                try:
                    status = (await client.post(url, content=body, headers=headers)).status_code
                except httpx.HTTPError:
                    status = 0
            return scheduled, sent, time.monotonic(), status

        tasks = []
        for index, offset in enumerate(offsets.tolist()):
            scheduled = start + offset
            while (delay := scheduled - time.monotonic()) > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(index, scheduled)))
        return start, await asyncio.gather(*tasks)


def _httpx_result(url: str, bodies, rate: float, requests: int, seconds: float, connections: int) -> dict:
    start, outcomes = asyncio.run(_httpx_offer(url, bodies, rate, requests, seconds, connections))
    good = [(s, d) for s, _, d, status in outcomes if status == 200]
    last = max((d for _, d in good), default=start)
    latency = np.array([(d - s) * 1000 for s, d in good])
    lag = np.array([(sent - s) * 1000 for s, sent, _, _ in outcomes])
    return {"answered_rps": len(good) / (last - start) if good else 0.0, "ok": len(good), "sent": len(outcomes),
            "p50_ms": float(np.percentile(latency, 50)) if len(latency) else None,
            "p99_ms": float(np.percentile(latency, 99)) if len(latency) else None,
            "client_lag_p99_ms": float(np.percentile(lag, 99))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", type=float, nargs="+", default=[200, 1000, 2000, 3000])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--connections", type=int, default=256)
    parser.add_argument("--shape", default="224,224,3")
    args = parser.parse_args()
    shape = tuple(int(n) for n in args.shape.split(","))
    port = _free_port()
    server = subprocess.Popen([sys.executable, str(REPO / "tests" / "numpy_serve_engine.py"), str(port), "0", "32",
                               "512", "5", "dynamic", "auto"], env={**os.environ, "NUMPY_ENGINE_SHAPE": args.shape},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        info = wait_ready(base, 60)
        bodies = request_bodies("raw", shape, None)
        for rate in args.rates:
            requests = int(rate * args.seconds)
            ours = offer_load(base + "/v1/infer", bodies, rate, requests, args.seconds,
                              connections=args.connections)
            mine = {"answered_rps": ours.achieved_rps, "ok": ours.ok, "sent": ours.sent,
                    "p50_ms": ours.percentile(50), "p99_ms": ours.percentile(99),
                    "client_lag_p99_ms": ours.client_lag_ms_p99}
            plain = _httpx_result(base + "/v1/infer", bodies, rate, requests, args.seconds, args.connections)
            for client, result in (("cnnbench", mine), ("httpx", plain)):
                print(json.dumps({"client": client, "offered_rps": rate, "shape": args.shape,
                                  "http_parser": info.get("http_parser"), "connections": args.connections,
                                  **{k: round(v, 2) if isinstance(v, float) else v for k, v in result.items()}}),
                      flush=True)
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
