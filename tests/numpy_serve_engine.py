"""A framework-free serving engine whose answer is a known function of the image, and a script that
serves it with the real server (Starlette on uvicorn, the real batcher): batching, the bounded queue,
faults and draining can be checked exactly, and quickly, without a deep-learning framework.

Usage: python tests/numpy_serve_engine.py PORT COMPUTE_MS MAX_BATCH MAX_QUEUE DEADLINE_MS [BATCHING [HTTP
[FRONTENDS]]]
(`benchmarks/gpu.py serving` and benchmarks/gpu_serve.sh also serve it with COMPUTE_MS 0: what the HTTP
stack alone sustains).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

# NUMPY_ENGINE_SHAPE=224,224,3: requests of a real model's size (the HTTP stack's cost grows with the body)
SHAPE = tuple(int(n) for n in os.environ.get("NUMPY_ENGINE_SHAPE", "4,4,1").split(","))


def expected_answer(image: np.ndarray) -> list[int]:
    """The classes the engine gives an image: a checksum of all its bytes mod 10, then the next ones.

    The checksum sums the image's 8-byte words (wrapping) where its size allows: at 224x224x3 that costs
    about 3 us against 60 us for a pixel sum, which the engine thread would pay per image under the GIL,
    so the no-model server measures the HTTP stack rather than its own checksum."""
    flat = np.ascontiguousarray(image).reshape(-1)
    words = flat.view(np.uint64) if flat.nbytes % 8 == 0 else flat.astype(np.uint64)
    first = int(words.sum(dtype=np.uint64)) % 10
    return [first, (first + 1) % 10]


class NumpyEngine:
    """A device that computes one batch at a time for ``compute_ms`` each, queued in launch order: a
    launch returns at once with the time its batch will be ready; collecting waits until then."""

    image_shape = SHAPE
    pad_multiple = 1

    def __init__(self, compute_ms: float, build_s: float = 0.0) -> None:
        time.sleep(build_s)  # a model that takes a while to load: /healthz must say so meanwhile
        self.compute_s = compute_ms / 1000.0
        self.device_free_at = 0.0
        self.launches: list[tuple[float, float, int]] = []  # (launched, ready, valid) per batch

    def staging_buffers(self, count: int, max_batch: int) -> list[np.ndarray]:
        self._host = [np.zeros((max_batch, *SHAPE), np.uint8) for _ in range(count)]
        return self._host

    def _answer(self, images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ids = np.array([expected_answer(image) for image in images])
        return ids, np.full(ids.shape, 0.5, np.float32)

    def launch(self, index: int, valid: int):
        now = time.perf_counter()
        self.device_free_at = max(self.device_free_at, now) + self.compute_s
        self.launches.append((now, self.device_free_at, valid))
        return self.device_free_at, self._answer(self._host[index][:valid].copy())

    def collect(self, handle):
        ready_at, answer = handle
        time.sleep(max(0.0, ready_at - time.perf_counter()))
        return answer

    def infer_now(self, images: np.ndarray):
        time.sleep(self.compute_s)
        return self._answer(images)

    def device_name(self) -> str:
        return "numpy"


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from cnnbench import envinfo
    from cnnbench.process_exit import leave
    from cnnbench.serve.command import EngineRecipe, serve
    from cnnbench.serve.config import ServeConfig
    from cnnbench.table.schema import SCHEMA_VERSION

    port, compute_ms, max_batch, max_queue, deadline_ms = sys.argv[1:6]
    batching = sys.argv[6] if len(sys.argv) > 6 else "dynamic"
    http = sys.argv[7] if len(sys.argv) > 7 else "auto"
    frontends = int(sys.argv[8]) if len(sys.argv) > 8 else 0
    # NUMPY_ENGINE_SERVE='{"body_timeout_s": 1}': any other ServeConfig field (the limits' tests)
    extra = json.loads(os.environ.get("NUMPY_ENGINE_SERVE", "{}"))
    config = ServeConfig(**{"port": int(port), "max_batch": int(max_batch), "max_queue": int(max_queue),
                            "deadline_ms": float(deadline_ms), "decode_workers": 2, "pad_multiple": 1,
                            "batching": batching, "max_body_bytes": 2**24, "http": http, "frontends": frontends,
                            "top_k": 2, **extra})
    info = {"image_shape": list(SHAPE), "model_name": "numpy",
            "row": {"schema_version": SCHEMA_VERSION, "mode": "serve-http", "variant": batching, "backend": "numpy",
                    "spec_name": "http_stack", "git_sha": envinfo.git_sha(),
                    "model": "none (HTTP stack only)", "backend_options": "", "max_batch": int(max_batch),
                    "batch_timeout_ms": float(deadline_ms), "max_queue": int(max_queue), "decode_workers": 2}}
    build_s = float(os.environ.get("NUMPY_ENGINE_BUILD_S", "0"))
    leave(serve(config, EngineRecipe("numpy_serve_engine", "NumpyEngine", (float(compute_ms), build_s)), info))


if __name__ == "__main__":
    main()
