"""What every front end speaks and refuses, in the single-process server (frontends = 0) and in the
multi-process one (frontends = 2): the Open Inference Protocol with the real Triton HTTP client, and a
hostile client's requests (held connections, huge heads, stalled bodies, disconnects mid-body, images
too large to decode, no Content-Type). After each refusal a good request gets its right answer. Servers
are real subprocesses on 127.0.0.1 serving the framework-free engine, with short timeouts."""

from __future__ import annotations

import json
import socket
import struct
import time

import cv2
import httpx
import numpy as np
import pytest
import tritonclient.http as triton
from numpy_serve_engine import SHAPE, expected_answer
from test_http_serve import _images, _raw
from test_serve_frontends import frontend_server
from tritonclient.utils import InferenceServerException

from cnnbench.serve.limits import image_pixels

LIMITS = {"header_timeout_s": 1.0, "body_timeout_s": 1.0, "max_pixels": 1_000_000, "max_header_bytes": 8192}


@pytest.fixture(scope="module", params=[0, 2], ids=["one-process", "two-front-ends"])
def server(request):
    server = frontend_server(compute_ms=2, frontends=request.param, max_batch=4,
                             env={"NUMPY_ENGINE_SERVE": json.dumps(LIMITS)})
    yield server
    assert server.stop() == 0
    # the clients gone mid-body (test_a_client_gone_mid_body...) left one counted line, no ASGI traceback
    log = server.process.stdout.read()
    assert "client(s) disconnected before their body arrived" in log and "Traceback" not in log, log[-3000:]


def _good(base: str, seed: int) -> None:
    image = _images(1, SHAPE, seed=seed)[0]
    answer = _raw(httpx, base, image)
    assert answer.status_code == 200 and answer.json()["classes"] == expected_answer(image)


def _port(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


def _exchange(base: str, data: bytes, wait_s: float = 5.0) -> bytes:
    """Send raw bytes on a new connection; everything the server sends until it closes (bounded)."""
    with socket.create_connection(("127.0.0.1", _port(base)), timeout=wait_s) as sock:
        sock.sendall(data)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except (TimeoutError, ConnectionResetError):
            pass
    return received


# -- the Open Inference Protocol, spoken by tritonclient -------------------------------------------


def test_triton_client_reads_readiness_metadata_and_config(server):
    client = triton.InferenceServerClient(server.base.removeprefix("http://"))
    assert client.is_server_live() and client.is_server_ready() and client.is_model_ready("numpy")
    metadata = client.get_model_metadata("numpy")
    assert metadata["inputs"] == [{"name": "IMAGE", "datatype": "UINT8", "shape": [-1, *SHAPE]}]
    assert [o["name"] for o in metadata["outputs"]] == ["CLASSES", "SCORES"]
    config = client.get_model_config("numpy")
    assert config["max_batch_size"] == 4 and config["dynamic_batching"]["max_queue_delay_microseconds"] == 5000
    with pytest.raises(InferenceServerException) as unknown:
        client.get_model_metadata("resnet9000")
    assert unknown.value.status() == "404" and "unknown model" in unknown.value.message()


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_triton_client_infers_raw_uint8_tensors_and_gets_the_top_k(server, binary):
    client = triton.InferenceServerClient(server.base.removeprefix("http://"))
    images = np.stack(_images(3, SHAPE, seed=21))
    tensor = triton.InferInput("IMAGE", list(images.shape), "UINT8")
    tensor.set_data_from_numpy(images, binary_data=binary)
    outputs = [triton.InferRequestedOutput(name, binary_data=binary) for name in ("CLASSES", "SCORES")]
    result = client.infer("numpy", [tensor], outputs=outputs, request_id="r1")
    assert result.as_numpy("CLASSES").tolist() == [expected_answer(i) for i in images]
    assert result.as_numpy("SCORES").shape == (3, 2) and result.get_response()["id"] == "r1"


def test_triton_client_sees_our_4xx_and_the_next_request_is_served(server):
    client = triton.InferenceServerClient(server.base.removeprefix("http://"))
    wrong = np.zeros((1, SHAPE[0] + 1, *SHAPE[1:]), np.uint8)
    tensor = triton.InferInput("IMAGE", list(wrong.shape), "UINT8")
    tensor.set_data_from_numpy(wrong)
    with pytest.raises(InferenceServerException) as refused:
        client.infer("numpy", [tensor])
    assert refused.value.status() == "400" and "shape" in refused.value.message()
    _good(server.base, 22)


def test_v2_sizes_that_disagree_and_unknown_models_are_refused(server):
    image = _images(1, SHAPE, seed=23)[0]
    head = json.dumps({"inputs": [{"name": "IMAGE", "datatype": "UINT8", "shape": [1, *SHAPE],
                                   "parameters": {"binary_data_size": image.size + 1}}]}).encode()
    cases = {
        "size disagrees with the shape": (head + image.tobytes() + b"\0", 400, "disagrees"),
        "header length past the body": (head, 400, "Inference-Header-Content-Length"),
    }
    for what, (body, status, words) in cases.items():
        length = str(len(head)) if what != "header length past the body" else str(len(head) + 10)
        answer = httpx.post(server.base + "/v2/models/numpy/infer", content=body,
                            headers={"Inference-Header-Content-Length": length}, timeout=10)
        assert answer.status_code == status and words in answer.json()["error"], (what, answer.text)
        _good(server.base, 24)
    missing = httpx.post(server.base + "/v2/models/other/infer", content=b"{}", timeout=10)
    assert missing.status_code == 404 and "unknown model" in missing.json()["error"]
    _good(server.base, 25)


# -- a hostile client --------------------------------------------------------------------------------


def test_idle_and_half_sent_connections_are_closed_and_stalled_bodies_get_408(server):
    began = time.monotonic()
    assert _exchange(server.base, b"") == b""  # idle: closed after header_timeout_s, nothing said
    half_head = _exchange(server.base, b"POST /v1/infer HTTP/1.1\r\nHost: x\r\n")
    assert half_head.startswith(b"HTTP/1.1 408") and b"header_timeout_s" in half_head
    short_body = _exchange(server.base, b"POST /v1/infer HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\n"
                                        b"Content-Length: 1000\r\n\r\n" + b"\0" * 10)
    assert short_body.startswith(b"HTTP/1.1 408") and b"body_timeout_s" in short_body
    assert time.monotonic() - began < 12
    _good(server.base, 31)


def test_a_head_over_the_limit_gets_431_and_the_connection_closes(server):
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n"
    answer = _exchange(server.base, head)
    assert answer.startswith(b"HTTP/1.1 431") and b"max_header_bytes" in answer
    _good(server.base, 32)


def test_a_client_gone_mid_body_costs_one_log_line_and_no_traceback(server):
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", _port(server.base))) as sock:
            sock.sendall(b"POST /v1/infer HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\n"
                         b"Content-Length: 100000\r\n\r\n" + b"\0" * 5000)
        time.sleep(0.1)
    _good(server.base, 33)
    assert 'cnnbench_client_disconnects_total' in httpx.get(server.base + "/metrics").text


def _oversized(kind: str) -> bytes:
    """A small real image whose header claims 16000 x 16000 pixels (never decoded: refused first)."""
    image = _images(1, (40, 48, 3), seed=34)[0]
    data = bytearray(cv2.imencode(".png" if kind == "png" else ".jpg", image)[1].tobytes())
    if kind == "png":
        data[16:24] = struct.pack(">II", 16000, 16000)
    else:
        sof = data.index(b"\xff\xc0")
        data[sof + 5:sof + 9] = struct.pack(">HH", 16000, 16000)
    return bytes(data)


def test_images_over_the_pixel_limit_get_413_and_no_content_type_gets_415(server):
    image = _images(1, (40, 48, 3), seed=35)[0]
    assert image_pixels(cv2.imencode(".jpg", image)[1].tobytes()) == 40 * 48
    assert image_pixels(cv2.imencode(".png", image)[1].tobytes()) == 40 * 48
    for kind in ("png", "jpeg"):
        answer = httpx.post(server.base + "/v1/infer", content=_oversized(kind), timeout=10,
                            headers={"content-type": f"image/{kind}"})
        assert answer.status_code == 413 and "256,000,000 pixels" in answer.json()["error"], answer.text
        _good(server.base, 36)
    bare = httpx.post(server.base + "/v1/infer", content=cv2.imencode(".png", image)[1].tobytes(), timeout=10)
    assert bare.status_code == 415 and "content type" in bare.json()["error"]
    _good(server.base, 37)
