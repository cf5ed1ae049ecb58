"""The peer a user would pick instead of `cnnbench serve`: the same model behind LitServe, loaded by the
same engine (cnnbench's serving engine of the backend: same weights, precision, normalisation and top-k
on the device), with LitServe's own batching (``max_batch_size``, ``batch_timeout``), its inference
workers (``workers_per_device``) and its uvicorn front ends (``num_api_servers``).

Each batch LitServe hands over is padded to the sizes cnnbench's batcher launches (a multiple of the
spec's ``serve.pad_multiple``, at most the max batch; padding rows dropped from the answer), and every
one of those sizes runs twice in ``setup`` before the worker takes requests: unpadded, every batch
size from 1 to 32 is a new shape, and cuDNN's autotuning of each new shape inside the timed seconds
made the first H200 run answer 330 requests/s with a p50 of 49 s. So the peer gets what cnnbench's
own server does before it says ready, and what differs is LitServe's request path.

LitServe reads each request as JSON (or a form), so a request carries its bytes base64-encoded:
``{"tensor": b64}`` (a raw uint8 H,W,C tensor of the model's shape) or ``{"image": b64}`` (JPEG/PNG,
decoded and resized in the worker, as cnnbench's server does in its decode threads).

  serve SPEC BACKEND DEVICE PORT [--max-batch N --batch-timeout-ms T --workers W --api-servers A]
  load URL INPUT RATE SECONDS CONNECTIONS OUT.csv [--source-size WxH]: cnnbench's load generator
      against it (open loop; at a rate above saturation, closed loop over CONNECTIONS), one serve-http
      row with backend_options server=litserve
  smoke: a tiny CPU model, raw and JPEG requests, each answered with the top-k (a dry run on CPU)
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

import litserve as ls  # noqa: E402
from runbook.steps import stop_group  # noqa: E402

from cnnbench.infer.batcher import batch_shapes, padded_size  # noqa: E402
from cnnbench.infer.images import decode_image  # noqa: E402


def describe_worker(engine) -> dict:
    """The row fields only the worker knows: its card, the framework's and LitServe's versions."""
    from cnnbench import envinfo

    return {"device_name": engine.device_name(), "backend_version": envinfo.package_version("torch"),
            "litserve": envinfo.package_version("litserve")}


class CnnbenchAPI(ls.LitAPI):
    def __init__(self, recipe, image_shape: tuple[int, int, int], max_batch: int, batch_timeout_s: float,
                 pad_multiple: int, describe: str | None = None) -> None:
        super().__init__(max_batch_size=max_batch, batch_timeout=batch_timeout_s, api_path="/predict")
        self.recipe, self.image_shape, self.pad_multiple = recipe, tuple(image_shape), pad_multiple
        self.describe = describe

    def setup(self, device) -> None:
        self.engine = self.recipe.build()
        for size in batch_shapes(self.max_batch_size, self.pad_multiple):
            for _ in range(2):  # the first call of a shape autotunes; the second checks it is done
                self.engine.infer_now(np.zeros((size, *self.image_shape), np.uint8))
        if self.describe:  # the card and versions the worker runs on, for the load's rows (first worker wins)
            with contextlib.suppress(FileExistsError), open(self.describe, "x") as out:
                json.dump(describe_worker(self.engine), out)

    def _forward(self, x: np.ndarray):
        """cnnbench's batcher's shapes: pad to a multiple (at most the max batch), drop the padding."""
        valid = len(x)
        size = padded_size(valid, self.pad_multiple, self.max_batch_size)
        if size > valid:
            x = np.concatenate([x, np.zeros((size - valid, *x.shape[1:]), x.dtype)])
        ids, scores = self.engine.infer_now(x)
        return ids[:valid], scores[:valid]

    def decode_request(self, request):
        if "tensor" in request:
            return np.frombuffer(base64.b64decode(request["tensor"]), np.uint8).reshape(self.image_shape)
        height, width, channels = self.image_shape
        return decode_image(base64.b64decode(request["image"]), (height, width), channels)

    def batch(self, inputs):
        return np.stack(inputs)

    def predict(self, x):
        if self.max_batch_size == 1:  # LitServe hands one request, unbatched
            ids, scores = self._forward(x[None])
            return ids[0], scores[0]
        return self._forward(x)

    def unbatch(self, output):
        ids, scores = output
        return list(zip(ids, scores))

    def encode_response(self, output):
        ids, scores = output
        return {"classes": np.asarray(ids).tolist(), "scores": [round(float(s), 6) for s in scores]}


def serve(spec_path: str, backend: str, device: str, port: int, max_batch: int, batch_timeout_ms: float,
          workers: int, api_servers: int, describe: str | None = None) -> None:

    from cnnbench.backend import load as load_backend
    from cnnbench.infer.plan import serve_run
    from cnnbench.serve.command import EngineRecipe
    from cnnbench.spec import load_spec

    spec = load_spec(spec_path)
    run, variant = serve_run(spec, backend, device)
    env = dict(load_backend(backend).launch_layout(run).env)
    recipe = EngineRecipe("cnnbench.serve.command", "backend_engine",
                          (backend, run, variant, spec.serve.top_k, spec.serve.pad_multiple), tuple(env.items()))
    api = CnnbenchAPI(recipe, (*run.image_size, run.channels), max_batch, batch_timeout_ms / 1000.0,
                      spec.serve.pad_multiple, describe)
    server = ls.LitServer(api, accelerator="cuda" if device == "gpu" else "cpu", devices=1,
                          workers_per_device=workers, timeout=60)
    server.run(host="127.0.0.1", port=port, num_api_servers=api_servers, generate_client_file=False,
               log_level="warning")


def bodies(kind: str, shape: tuple[int, int, int], source_size: tuple[int, int] | None) -> list:
    from cnnbench.serve.loadgen import request_bodies

    field = "tensor" if kind == "raw" else "image"
    return [(json.dumps({field: base64.b64encode(body).decode()}).encode(), {"content-type": "application/json"})
            for body, _ in request_bodies(kind, shape, source_size, count=8)]


def load(url: str, kind: str, rate: float, seconds: float, connections: int, out: str, shape: tuple[int, int, int],
         source_size: tuple[int, int] | None, info: dict) -> dict:
    from cnnbench.serve.load import load_row
    from cnnbench.serve.loadgen import offer_load
    from cnnbench.table import store

    result = offer_load(url + "/predict", bodies(kind, shape, source_size), rate, int(rate * seconds), seconds,
                        timeout_s=20, connections=connections, processes=0)
    row = load_row(info, result, kind, None)
    row.update(stamp(info.get("worker", {})))
    store.append_rows(Path(out), [row])
    print(f"litserve {kind} {rate:g} req/s offered: {result.achieved_rps:.0f} answered/s, p50 "
          f"{result.percentile(50) or float('nan'):.1f} ms, p99 {result.percentile(99) or float('nan'):.1f} ms, "
          f"errors {result.errors_text() or 'none'}")
    return row


def stamp(worker: dict) -> dict:
    """What every cnnbench row carries (commit, Python, host) and what the worker described (card,
    versions): LitServe's rows are compared with cnnbench's, so they name the same things."""
    from cnnbench import envinfo

    fields = {"git_sha": envinfo.git_sha(), "python": envinfo.python_version(), "host": envinfo.host_name()}
    if worker:
        fields.update(device_name=worker.get("device_name"), backend_version=worker.get("backend_version"),
                      stack_versions=f"litserve={worker.get('litserve')}")
    return fields


def _worker_description(path: str | None) -> dict:
    """What ``serve --describe`` wrote; empty when it was not asked for or no worker got that far."""
    try:
        return json.loads(Path(path).read_text()) if path else {}
    except (OSError, ValueError):
        return {}


def _wait(url: str, timeout_s: float) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise SystemExit(f"litserve at {url} not healthy after {timeout_s:.0f} s")


SMOKE_SPEC = """name = "litserve_smoke"
model = "smallcnn"
dataset = "synthetic"
image_size = 16
channels = 3
num_classes = 10
backends = ["torch"]
device = "cpu"
[serve]
top_k = 3
"""


def smoke(rows: str | None = None) -> None:
    """A tiny CPU model behind LitServe (batch 4, 2 front ends): raw and JPEG requests each get 3 classes;
    with ``rows``, a second of raw load appends one row there, stamped as the GPU runs' rows are."""
    import httpx

    from cnnbench.serve.loadgen import request_bodies

    folder = Path(tempfile.mkdtemp())
    spec, describe = folder / "litserve_smoke.toml", folder / "worker.json"
    spec.write_text(SMOKE_SPEC)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, __file__, "serve", str(spec), "torch", "cpu", str(port),
                               "--max-batch", "4", "--batch-timeout-ms", "5", "--api-servers", "2",
                               "--describe", str(describe)],
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                  filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))},
                              start_new_session=True)  # its own group: LitServe's workers go with it
    url = f"http://127.0.0.1:{port}"
    try:
        _wait(url, 120)
        for kind in ("raw", "jpeg"):
            body, headers = bodies(kind, (16, 16, 3), (48, 40) if kind == "jpeg" else None)[0]
            answer = httpx.post(url + "/predict", content=body, headers=headers, timeout=30)
            assert answer.status_code == 200 and len(answer.json()["classes"]) == 3, answer.text
            print(f"litserve smoke {kind}: {answer.json()}")
        raw = request_bodies("raw", (16, 16, 3), None, count=1)[0][0]
        assert len(raw) == 16 * 16 * 3
        if rows:
            info = {"row": {"schema_version": 3, "mode": "serve-http", "variant": "litserve", "backend": "torch",
                            "model": "smallcnn", "backend_options": "server=litserve;workers=1;api_servers=2"},
                    "worker": json.loads(describe.read_text())}
            load(url, "raw", 20, 1.0, 4, rows, (16, 16, 3), None, info)
    finally:
        stop_group(server, 30)  # the group: LitServe's API servers and workers outlive a signal to the parent
    deadline = time.monotonic() + 15  # killed children are reaped by init a moment later
    while time.monotonic() < deadline:
        try:
            os.killpg(server.pid, 0)
        except ProcessLookupError:
            print("litserve smoke: the server and its workers are gone")
            return
        time.sleep(0.2)
    raise SystemExit("litserve smoke: a process of the server's group outlived it by 15 s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve")
    for name in ("spec", "backend", "device"):
        s.add_argument(name)
    s.add_argument("port", type=int)
    s.add_argument("--max-batch", type=int, default=32)
    s.add_argument("--batch-timeout-ms", type=float, default=5.0)
    s.add_argument("--workers", type=int, default=1)
    s.add_argument("--api-servers", type=int, default=4)
    s.add_argument("--describe", default=None, help="a file the first worker writes its card and versions to")
    ld = sub.add_parser("load")
    ld.add_argument("url")
    ld.add_argument("input", choices=("raw", "jpeg"))
    ld.add_argument("rate", type=float)
    ld.add_argument("seconds", type=float)
    ld.add_argument("connections", type=int)
    ld.add_argument("out")
    ld.add_argument("--shape", default="224,224,3")
    ld.add_argument("--source-size", default=None)
    ld.add_argument("--info", default="{}", help="JSON: the row's configuration half (model, backend, ...)")
    ld.add_argument("--describe", default=None, help="the file `serve --describe` wrote: card and versions")
    sm = sub.add_parser("smoke")
    sm.add_argument("--rows", default=None, help="also load it for a second into this CSV (one raw row)")
    args = parser.parse_args()
    if args.command == "serve":
        serve(args.spec, args.backend, args.device, args.port, args.max_batch, args.batch_timeout_ms, args.workers,
              args.api_servers, args.describe)
    elif args.command == "load":
        shape = tuple(int(n) for n in args.shape.split(","))
        size = tuple(int(n) for n in args.source_size.split("x")) if args.source_size else None
        info = {"row": {"schema_version": 3, "mode": "serve-http", "variant": "litserve",
                        "backend_options": "server=litserve", **json.loads(args.info)},
                "worker": _worker_description(args.describe)}
        load(args.url, args.input, args.rate, args.seconds, args.connections, args.out, shape, size, info)
    else:
        smoke(args.rows)


if __name__ == "__main__":
    main()
