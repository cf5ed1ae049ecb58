"""uint8 images -> the normalised float32 a model takes, defined once for every framework.

A front-end that decodes images holds uint8 HWC pixels; a well-built one copies those (a quarter
of the float32 bytes) and converts them on the device. The conversion is one multiply-add per
channel, ``x * scale + shift`` with ``scale = 1 / (255 std)`` and ``shift = -mean / std``, so the
host form here and each framework's device form round the same way.
"""

from __future__ import annotations

import numpy as np

# ImageNet's channel statistics (torchvision's values) for RGB; other channel counts (the
# synthetic and digit benchmarks) use a neutral mean and spread.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def channel_scale_shift(channels: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel (scale, shift), float32, for ``x_uint8 * scale + shift``."""
    mean = np.array(IMAGENET_MEAN if channels == 3 else (0.5,) * channels, np.float32)
    std = np.array(IMAGENET_STD if channels == 3 else (0.25,) * channels, np.float32)
    return (1.0 / (255.0 * std)).astype(np.float32), (-mean / std).astype(np.float32)


def normalize_uint8_nhwc(images: np.ndarray) -> np.ndarray:
    """uint8 (N, H, W, C) -> float32 (N, C, H, W) normalised per channel, on the host."""
    scale, shift = channel_scale_shift(images.shape[-1])
    return np.ascontiguousarray((images.astype(np.float32) * scale + shift).transpose(0, 3, 1, 2))


def synthetic_uint8_nhwc(count: int, image_size: int | tuple[int, int], channels: int, seed: int) -> np.ndarray:
    """Fixed-seed random pixels, uint8 (N, H, W, C); ``image_size`` is H = W or (H, W)."""
    height, width = (image_size, image_size) if isinstance(image_size, int) else image_size
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (count, height, width, channels), dtype=np.uint8)
