"""`cnnbench serve` and `cnnbench load` over real HTTP on 127.0.0.1: servers are real subprocesses
started by fixtures and stopped by their pids; every request loop is bounded in count and time.

The batching, queue, fault and drain tests serve a framework-free engine whose answer is a known
function of each image (tests/numpy_serve_engine.py), so a mixed-up or lost answer is caught exactly;
the model tests serve a tiny smallcnn with PyTorch and with JAX.
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cv2
import httpx
import numpy as np
import pytest
from conftest import REPO, run_cli, write_spec
from numpy_serve_engine import SHAPE, expected_answer

MODEL_SHAPE = (16, 16, 3)
TINY_SERVE = """
    name = "serve_tiny"
    model = "smallcnn"
    dataset = "synthetic"
    image_size = 16
    channels = 3
    num_classes = 10
    backends = ["{backend}"]
    device = "cpu"

    [serve]
    max_batch = 8
    timeout_ms = 20
    pad_multiple = 4
    max_queue = 64
    max_body_bytes = 20000
    decode_workers = 2
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, command: list[str], port: int, env: dict[str, str] | None = None) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.process = subprocess.Popen(command, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.seen_warming = False  # /healthz answered 503 "warming" before it was ready

    def wait_ready(self) -> Server:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"server exited {self.process.returncode}: {self.process.stdout.read()}")
            try:
                health = httpx.get(self.base + "/healthz", timeout=2)
                if health.status_code == 200:
                    return self
                self.seen_warming |= health.json()["status"] == "warming"
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise AssertionError("server not ready within 120 s")

    def stop(self) -> int:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        return self.process.returncode


def _numpy_server(compute_ms: float, max_batch: int, max_queue: int, deadline_ms: float, batching: str = "dynamic",
                  env: dict[str, str] | None = None) -> Server:
    port = _free_port()
    command = [sys.executable, str(REPO / "tests" / "numpy_serve_engine.py"), str(port), str(compute_ms),
               str(max_batch), str(max_queue), str(deadline_ms), batching]
    return Server(command, port, env).wait_ready()


def _model_server(tmp_path: Path, backend: str) -> Server:
    spec = write_spec(tmp_path, TINY_SERVE.format(backend=backend), f"{backend}.toml")
    port = _free_port()
    return Server([sys.executable, "-m", "cnnbench.cli", "serve", str(spec), "--port", str(port)], port).wait_ready()


def _raw(client: httpx.Client, base: str, image: np.ndarray, **headers: str) -> httpx.Response:
    shape = ",".join(map(str, image.shape))
    return client.post(base + "/v1/infer", content=image.tobytes(), timeout=30,
                       headers={"x-tensor-shape": shape, "x-tensor-dtype": "uint8", **headers})


def _images(count: int, shape: tuple[int, ...], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, shape, dtype=np.uint8) for _ in range(count)]


def _concurrently(function, items, workers: int = 16) -> list:
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(function, items))


def _metric(base: str, name: str) -> float:
    for line in httpx.get(base + "/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


# -- the server itself, on the framework-free engine ----------------------------------------------


def test_healthz_and_infer_answer_503_until_the_model_is_loaded_and_warm():
    port = _free_port()
    server = Server([sys.executable, str(REPO / "tests" / "numpy_serve_engine.py"), str(port), "1", "4", "8", "1"],
                    port, env={"NUMPY_ENGINE_BUILD_S": "3"})
    try:
        deadline, early = time.monotonic() + 60, None
        while early is None and time.monotonic() < deadline:
            try:
                early = httpx.post(server.base + "/v1/infer", content=_image_bytes(), timeout=5,
                                   headers={"x-tensor-shape": ",".join(map(str, SHAPE))})
            except httpx.ConnectError:  # not listening yet
                time.sleep(0.1)
        assert early is not None and early.status_code == 503 and "warming up" in early.json()["error"]
        server.wait_ready()
        assert server.seen_warming
    finally:
        assert server.stop() == 0


def _image_bytes() -> bytes:
    return np.zeros(SHAPE, np.uint8).tobytes()


def test_past_max_queue_the_server_answers_503_with_retry_after_and_every_200_is_right():
    server = _numpy_server(compute_ms=100, max_batch=2, max_queue=4, deadline_ms=5)
    try:
        images = _images(24, SHAPE, seed=1)
        with httpx.Client() as client:
            answers = _concurrently(lambda image: _raw(client, server.base, image), images, workers=24)
            statuses = [a.status_code for a in answers]
            assert statuses.count(503) > 0 and statuses.count(200) > 0, statuses
            for image, answer in zip(images, answers):
                if answer.status_code == 503:
                    assert answer.headers["retry-after"] == "1" and "max_queue 4" in answer.json()["error"]
                else:
                    assert answer.json()["classes"] == expected_answer(image)
            after = _raw(client, server.base, images[0])
            assert after.status_code == 200 and after.json()["classes"] == expected_answer(images[0])
        assert _metric(server.base, 'cnnbench_requests_total{status="503"}') == statuses.count(503)
    finally:
        assert server.stop() == 0


def test_an_exception_in_the_model_call_fails_that_batch_with_500_and_the_next_batch_is_served():
    server = _numpy_server(compute_ms=1, max_batch=4, max_queue=16, deadline_ms=1,
                           env={"CNNBENCH_FAULT": "step=1,kind=raise"})
    try:
        images = _images(4, SHAPE, seed=2)
        with httpx.Client() as client:
            answers = [_raw(client, server.base, image) for image in images]  # one batch each
        assert [a.status_code for a in answers] == [200, 500, 200, 200]
        assert "injected fault" in answers[1].json()["error"]
        assert [a.json()["classes"] for a in answers[2:]] == [expected_answer(i) for i in images[2:]]
    finally:
        assert server.stop() == 0


def test_sigterm_stops_accepting_finishes_what_is_queued_and_exits_0():
    server = _numpy_server(compute_ms=500, max_batch=2, max_queue=64, deadline_ms=5)
    images = _images(6, SHAPE, seed=3)
    with httpx.Client() as client, ThreadPoolExecutor(6) as pool:
        pending = [pool.submit(_raw, client, server.base, image) for image in images]
        deadline = time.monotonic() + 10
        # 2 batches in flight, the third waiting: all six have arrived
        while _metric(server.base, "cnnbench_queue_depth") < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(server.process.pid, signal.SIGTERM)
        answers = [p.result(timeout=30) for p in pending]
    assert [a.status_code for a in answers] == [200] * 6
    assert [a.json()["classes"] for a in answers] == [expected_answer(i) for i in images]
    assert server.process.wait(timeout=30) == 0
    with pytest.raises(httpx.ConnectError):
        httpx.get(server.base + "/healthz", timeout=2)


def test_batching_none_makes_one_model_call_per_request():
    server = _numpy_server(compute_ms=5, max_batch=8, max_queue=32, deadline_ms=5, batching="none")
    try:
        images = _images(8, SHAPE, seed=4)
        with httpx.Client() as client:
            answers = _concurrently(lambda image: _raw(client, server.base, image), images)
        assert [a.json()["classes"] for a in answers] == [expected_answer(i) for i in images]
        assert _metric(server.base, "cnnbench_batch_size_count") == 0  # no batcher in this mode
    finally:
        assert server.stop() == 0


# -- a real model: PyTorch ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def torch_server(tmp_path_factory):
    server = _model_server(tmp_path_factory.mktemp("serve"), "torch")
    yield server
    assert server.stop() == 0


def _png(image: np.ndarray) -> bytes:
    return cv2.imencode(".png", cv2.cvtColor(image, cv2.COLOR_RGB2BGR))[1].tobytes()


def test_health_info_and_prometheus_metrics(torch_server):
    base = torch_server.base
    assert httpx.get(base + "/healthz").json() == {"status": "ready"}
    info = httpx.get(base + "/v1/info").json()
    assert info["image_shape"] == list(MODEL_SHAPE) and info["config"]["max_batch"] == 8
    assert info["row"]["mode"] == "serve-http" and info["row"]["backend"] == "torch"
    text = httpx.get(base + "/metrics").text
    for series in ("cnnbench_requests_total", "cnnbench_request_latency_seconds_bucket",
                   "cnnbench_batch_size_bucket", "cnnbench_queue_depth"):
        assert series in text or series.removesuffix("_total") in text, series
    # the engine's time: this one process's CPU and its launcher's states (warm-up launches count)
    assert _metric(base, "cnnbench_engine_process_cpu_seconds_total") > 0
    assert _metric(base, "cnnbench_launches_total") >= 1
    launching = _metric(base, 'cnnbench_launcher_seconds_total{state="launching"}')
    assert 0 < _metric(base, "cnnbench_launcher_cpu_seconds_total") <= launching * 1.05 + 0.01
    for state in ("no_request", "filling", "device_full"):
        assert f'cnnbench_launcher_seconds_total{{state="{state}"}}' in text, state


def test_bad_inputs_get_a_4xx_with_a_one_line_json_error_and_the_server_keeps_serving(torch_server):
    base, image = torch_server.base, _images(1, MODEL_SHAPE, seed=5)[0]
    jpeg = cv2.imencode(".jpg", image)[1].tobytes()
    infer, as_jpeg = base + "/v1/infer", {"content-type": "image/jpeg"}
    with httpx.Client(timeout=30) as client:
        good = _raw(client, base, image).json()
        bad = {
            "non-image bytes": (client.post(infer, content=b"not an image at all", headers=as_jpeg),
                                400, "cannot decode"),
            "truncated JPEG": (client.post(infer, content=jpeg[: len(jpeg) // 2], headers=as_jpeg),
                               400, "truncated JPEG"),
            "wrong tensor shape": (_raw(client, base, np.zeros((8, 8, 3), np.uint8)), 400, "X-Tensor-Shape"),
            "wrong dtype": (_raw(client, base, image, **{"x-tensor-dtype": "float32"}), 400, "X-Tensor-Dtype"),
            "wrong byte count": (client.post(infer, content=b"\0" * 10, headers={"x-tensor-shape": "16,16,3"}),
                                 400, "bytes"),
            "empty body": (client.post(infer, content=b"", headers={"content-type": "image/png"}), 400, "empty"),
            "body over the limit": (client.post(infer, content=b"\0" * 30000, headers={"content-type": "image/png"}),
                                    413, "max_body_bytes"),
            "unknown content type": (client.post(infer, content=b"{}", headers={"content-type": "application/json"}),
                                     415, "content type"),
        }
        for what, (answer, status, words) in bad.items():
            assert answer.status_code == status, (what, answer.text)
            assert "\n" not in answer.text.strip() and words in answer.json()["error"], (what, answer.text)
            after = _raw(client, base, image)
            assert after.status_code == 200 and after.json()["classes"] == good["classes"], what


def test_png_bodies_are_decoded_to_the_same_answer_as_the_raw_tensor_and_jpeg_is_served(torch_server):
    base = torch_server.base
    with httpx.Client(timeout=30) as client:
        for image in _images(3, MODEL_SHAPE, seed=6):
            raw = _raw(client, base, image).json()
            png = client.post(base + "/v1/infer", content=_png(image), headers={"content-type": "image/png"}).json()
            assert png["classes"] == raw["classes"]
            assert png["scores"] == pytest.approx(raw["scores"], abs=1e-5)
        big = _images(1, (40, 48, 3), seed=7)[0]  # resized to 16x16 by the server
        jpeg = client.post(base + "/v1/infer", content=cv2.imencode(".jpg", big)[1].tobytes(),
                           headers={"content-type": "image/jpeg"})
        assert jpeg.status_code == 200 and len(jpeg.json()["classes"]) == 5


def test_concurrent_requests_are_batched_and_each_gets_its_own_answer(torch_server):
    base, images = torch_server.base, _images(16, MODEL_SHAPE, seed=8)
    with httpx.Client(timeout=30) as client:
        alone = [_raw(client, base, image).json() for image in images]  # batches of one
        batches_before = _metric(base, "cnnbench_batch_size_count")
        together = _concurrently(lambda image: _raw(client, base, image).json(), images * 2)
        batches = _metric(base, "cnnbench_batch_size_count") - batches_before
    for reference, answer in zip(alone * 2, together):
        assert answer["classes"] == reference["classes"]
        assert answer["scores"] == pytest.approx(reference["scores"], abs=1e-5)
    assert batches < len(together)  # some requests shared a batch


def test_load_command_writes_serve_http_rows(torch_server, tmp_path):
    out = tmp_path / "serve.csv"
    done = run_cli("load", torch_server.base, "--rate", "40", "--requests", "40", "--duration", "5",
                   "--out", out, timeout=120)
    assert done.returncode == 0, done.stderr
    (row,) = list(csv.DictReader(out.open()))
    assert row["mode"] == "serve-http" and row["variant"] == "dynamic" and row["status"] == "ok"
    assert row["requests_offered"] == "40" and row["requests"] == "40" and row["errors_by_status"] == ""
    assert row["request_input"] == "raw" and float(row["mean_batch"]) >= 1.0
    assert 0 < float(row["latency_ms_p50"]) <= float(row["latency_ms_p99"])
    assert row["arrival_rate_rps"] == "40" and float(row["images_per_sec"]) > 5
    assert float(row["client_lag_ms_p99"]) >= 0 and "http=" in row["backend_options"]
    # where the engine's side spent the rate, from /metrics before and after it
    said = re.search(r"engine side: engine process (\d+) us CPU per image, launch ([\d.]+) ms \(launcher CPU "
                     r"([\d.]+) ms\), launcher idle (\d+)%", done.stdout)
    assert said, done.stdout
    assert int(said[1]) > 0 and float(said[2]) > 0 and 0 <= int(said[4]) <= 100


# -- real models: JAX, TensorFlow --------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["jax", "tensorflow"])
def test_jax_and_tensorflow_servers_batch_and_decode_like_the_raw_tensor(tmp_path, backend):
    server = _model_server(tmp_path, backend)
    try:
        images = _images(8, MODEL_SHAPE, seed=9)
        with httpx.Client(timeout=30) as client:
            alone = [_raw(client, server.base, image).json() for image in images]
            together = _concurrently(lambda image: _raw(client, server.base, image).json(), images)
            png = client.post(server.base + "/v1/infer", content=_png(images[0]),
                              headers={"content-type": "image/png"}).json()
        assert [a["classes"] for a in together] == [a["classes"] for a in alone]
        for batched, single in zip(together, alone):  # a padded batch answers each image as alone
            assert batched["scores"] == pytest.approx(single["scores"], abs=1e-5)
        assert png["classes"] == alone[0]["classes"]
        assert json.loads(httpx.get(server.base + "/v1/info").text)["row"]["backend"] == backend
    finally:
        assert server.stop() == 0


# -- refusals ----------------------------------------------------------------------------------------


def test_load_refuses_a_non_loopback_target_and_serve_refuses_what_it_cannot_serve(tmp_path):
    done = run_cli("load", "http://192.0.2.1:8000", "--rate", "1", "--out", tmp_path / "x.csv", timeout=60)
    assert done.returncode == 2 and "not a loopback address" in done.stderr
    assert not (tmp_path / "x.csv").exists()
    spec = write_spec(tmp_path, TINY_SERVE.format(backend="keras"))
    done = run_cli("serve", spec, timeout=60)
    assert done.returncode == 2 and "no serving engine; use one of torch, tensorflow, jax" in done.stderr
    done = run_cli("serve", spec, "--backend", "torch", "--max-queue", "0", timeout=60)
    assert done.returncode == 2 and "max_queue must be >= 1" in done.stderr
    done = run_cli("serve", spec, "--backend", "torch", "--switch-interval-ms", "-1", timeout=60)
    assert done.returncode == 2 and "switch_interval_ms must be 0..100" in done.stderr
    done = run_cli("serve", spec, "--backend", "torch", "--stop-timeout-s", "0", timeout=60)
    assert done.returncode == 2 and "stop_timeout_s must be > 0" in done.stderr
