"""From a request's bytes to its answer, shared by the /v1 and /v2 routes: the image, the model's
results or the status that says why not, and the one-line JSON error."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from cnnbench.infer.batcher import Closed, QueueFull
from cnnbench.infer.images import decode_image, raw_tensor
from cnnbench.serve.limits import check_pixels


class Unavailable(RuntimeError):
    """The engine cannot take requests (it stopped, or a front end has no free slot): 503."""


def error_response(status: int, message: str, close: bool = False) -> Any:
    from starlette.responses import JSONResponse

    headers = {"Retry-After": "1"} if status == 503 else {}
    if close or status == 408:  # the rest of this connection's bytes cannot be trusted
        headers["Connection"] = "close"
    return JSONResponse({"error": " ".join(message.split())}, status_code=status, headers=headers or None)


@contextlib.contextmanager
def admitted(service: Any) -> Iterator[None]:
    """Hold a place for one request while its body is decoded, or raise QueueFull (503) at once when the
    requests waiting and those being decoded already fill what the service can take
    (``service.refusal(decoding)``: why not, or None). A refused request then costs its body's read, not
    a decode: a 1080p JPEG is about 6 ms of one core, and offered three times what the engine answered,
    front ends that decoded first spent their cores on frames they then refused."""
    refusal = service.refusal(service.admitting)
    if refusal:
        raise QueueFull(refusal)
    service.admitting += 1
    try:
        yield
    finally:
        service.admitting -= 1


async def image_of(service: Any, body: bytes, headers: Any) -> np.ndarray:
    """One /v1/infer body -> the model's (H, W, C) uint8 image; raises BadInput or RequestRefused."""
    shape = headers.get("x-tensor-shape")
    if shape is not None:  # a memcpy at most: not worth a thread hop
        return raw_tensor(body, shape, headers.get("x-tensor-dtype", "uint8"), service.image_shape)
    check_pixels(body, service.config)
    height, width, channels = service.image_shape
    return await asyncio.get_running_loop().run_in_executor(service.pool, decode_image, body, (height, width),
                                                            channels)


async def infer_status(service: Any, images: list[np.ndarray]) -> tuple[int, Any]:
    """(200, [(ids, scores), ...]) for the images, or (status, error message)."""
    try:
        return 200, await asyncio.gather(*(service.infer(image) for image in images))
    except (QueueFull, Closed, Unavailable) as exc:
        return 503, str(exc)
    except Exception as exc:  # noqa: BLE001 - the model call failed: this request (its batch) only
        return 500, f"model call failed: {type(exc).__name__}: {exc}"
