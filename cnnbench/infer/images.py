"""Request bodies -> one uint8 HWC image of the model's size, with one clear error per bad input.

Two kinds of body: an encoded image (JPEG or PNG, decoded by the suite's one decoder,
cnnbench.data.decode, in the server's pool of decode threads) or a raw uint8 tensor whose shape and dtype
come in headers. Normalisation is not done here: the backends do it on the device
(cnnbench.data.normalize), so the host copies a quarter of the bytes a float32 batch would need.
"""

from __future__ import annotations

import numpy as np


class BadInput(ValueError):
    """A request body that cannot become an input image; the message is one line for the client."""


def decode_image(data: bytes, size_hw: tuple[int, int], channels: int) -> np.ndarray:
    """JPEG/PNG bytes -> uint8 (H, W, channels), RGB order, resized to the model's (H, W). Decoded
    by the suite's one image decoder (cnnbench.data.decode: truncated and corrupt files refused)."""
    import cv2

    from cnnbench.data import decode
    from cnnbench.errors import DataError

    if not data:
        raise BadInput("empty body: expected JPEG or PNG bytes")
    try:
        image = decode.decode_image(data, "body")
    except DataError as exc:
        raise BadInput(f"cannot decode the body as an image: {exc}") from None
    height, width = size_hw
    if image.shape[:2] != (height, width):
        shrinking = image.shape[0] > height or image.shape[1] > width
        image = cv2.resize(image, (width, height), interpolation=cv2.INTER_AREA if shrinking else cv2.INTER_LINEAR)
    if channels == 1:
        return cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)[:, :, None]
    return image


def parse_shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(part) for part in text.replace("x", ",").split(","))
    except ValueError:
        raise BadInput(f"X-Tensor-Shape: expected comma-separated integers such as 224,224,3, found {text!r}") from None
    if not shape or any(n < 1 for n in shape):
        raise BadInput(f"X-Tensor-Shape: dimensions must be >= 1, found {text!r}")
    return shape


def raw_tensor(data: bytes, shape_text: str, dtype_text: str, expected: tuple[int, int, int]) -> np.ndarray:
    """A raw uint8 tensor in the model's HWC shape (headers X-Tensor-Shape, X-Tensor-Dtype)."""
    if not data:
        raise BadInput("empty body: expected the tensor's bytes")
    if dtype_text.strip().lower() != "uint8":
        raise BadInput(f"X-Tensor-Dtype: expected uint8, found {dtype_text!r}")
    shape = parse_shape(shape_text)
    if shape != expected:
        raise BadInput(f"X-Tensor-Shape: the model takes {','.join(map(str, expected))} (H,W,C), "
                       f"found {','.join(map(str, shape))}")
    need = int(np.prod(shape))
    if len(data) != need:
        raise BadInput(f"body has {len(data)} bytes; a uint8 tensor of shape {shape_text} needs {need}")
    return np.frombuffer(data, np.uint8).reshape(shape)


def encode_image(image: np.ndarray, fmt: str = "jpeg", quality: int = 90) -> bytes:
    """uint8 HWC RGB (or HW1) -> JPEG or PNG bytes (for load generation and tests)."""
    import cv2

    pixels = image if image.shape[-1] == 1 else cv2.cvtColor(image, cv2.COLOR_RGB2BGR)
    params = [cv2.IMWRITE_JPEG_QUALITY, quality] if fmt == "jpeg" else []
    ok, encoded = cv2.imencode(".jpg" if fmt == "jpeg" else ".png", pixels, params)
    if not ok:
        raise ValueError(f"cannot encode an image of shape {image.shape} as {fmt}")
    return encoded.tobytes()
