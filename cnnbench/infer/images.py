"""Request bodies -> one uint8 HWC image of the model's size, with one clear error per bad input.

Two kinds of body: an encoded image (JPEG or PNG, decoded with OpenCV's ``cv2.imdecode``, which
releases the GIL, so a thread pool decodes in parallel) or a raw uint8 tensor whose shape and dtype
come in headers. Normalisation (scale, mean, std) is not done here: the backends do it on the
device, so the host copies a quarter of the bytes a float32 batch would need.
"""

from __future__ import annotations

import numpy as np

# Per-channel mean and std of the [0, 1] pixel values, applied on the device. ImageNet's for RGB
# models; a grey model gets the mid-grey 0.5 / 0.5.
RGB_MEAN, RGB_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class BadInput(ValueError):
    """A request body that cannot become an input image; the message is one line for the client."""


def normalisation(channels: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(mean, std) per channel, of pixel values scaled to [0, 1]."""
    if channels == 3:
        return RGB_MEAN, RGB_STD
    return (0.5,) * channels, (0.5,) * channels


def scale_and_shift(channels: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel float32 (scale, shift) with uint8 * scale + shift == (x / 255 - mean) / std: the
    whole normalisation as one multiply-add on the device."""
    mean, std = normalisation(channels)
    scale = np.array([1.0 / (255.0 * s) for s in std], np.float32)
    shift = np.array([-m / s for m, s in zip(mean, std)], np.float32)
    return scale, shift


def _looks_complete(data: bytes) -> str | None:
    """libjpeg decodes a truncated JPEG into a half-grey picture with only a warning: check the
    markers ourselves so that a cut-off upload is an error, not a silently wrong answer."""
    if data[:3] == b"\xff\xd8\xff" and not data.rstrip(b"\x00").endswith(b"\xff\xd9"):
        return "truncated JPEG: no end-of-image marker"
    if data[:8] == b"\x89PNG\r\n\x1a\n" and b"IEND" not in data[-16:]:
        return "truncated PNG: no IEND chunk"
    return None


def decode_image(data: bytes, size: int, channels: int) -> np.ndarray:
    """JPEG/PNG bytes -> uint8 (size, size, channels), RGB order, resized to the model's size."""
    import cv2

    if not data:
        raise BadInput("empty body: expected JPEG or PNG bytes")
    problem = _looks_complete(data)
    if problem:
        raise BadInput(problem)
    flag = cv2.IMREAD_GRAYSCALE if channels == 1 else cv2.IMREAD_COLOR
    image = cv2.imdecode(np.frombuffer(data, np.uint8), flag)
    if image is None:
        raise BadInput(f"cannot decode the body as an image ({len(data)} bytes; expected JPEG or PNG)")
    if image.shape[:2] != (size, size):
        shrinking = image.shape[0] > size or image.shape[1] > size
        image = cv2.resize(image, (size, size), interpolation=cv2.INTER_AREA if shrinking else cv2.INTER_LINEAR)
    if channels == 1:
        return image[:, :, None]
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)


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
