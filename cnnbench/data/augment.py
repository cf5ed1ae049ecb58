"""The augmentation's random draws: one crop box and one flip bit per sample, the same in every framework.

A draw is a pure function of ``(seed, epoch, sample index)``: a counter-based hash (splitmix64's
finaliser over the three numbers and a stream number) gives each sample its own uniform numbers, with no
generator state. So PyTorch, TensorFlow and JAX, any number of loader workers and any visiting order see
the same crops; draws for a whole batch are a few vectorised numpy operations.

The boxes are applied on the device by each framework's ``backends/<fw>/transforms.py`` ``prepare``,
which samples output pixel (i, j) of an (H_out, W_out) crop from the source at

    y = y0 + (i + 0.5) * h / H_out - 0.5,    x = x0 + (j + 0.5) * w / W_out - 0.5

bilinearly (no antialiasing); a point outside the image's area [-0.5, H - 0.5] x [-0.5, W - 0.5] is 0
(zero padding), a point inside it but beyond the outermost pixel centres takes the edge pixel (as any
image resize does). A flip mirrors the output: column j takes the sample of column W_out - 1 - j.

Kinds (``out_hw`` is the output size):

- ``random_resized_crop`` (training): torchvision's ``RandomResizedCrop`` -- area fraction uniform in
  (0.08, 1), aspect ratio log-uniform in (3/4, 4/3), integer box of round(sqrt(area * ratio)) wide and
  round(sqrt(area / ratio)) high at a uniform integer offset; the first of 10 tries that fits, else the
  centre crop of the whole image clamped to that ratio range; horizontal flip with probability 0.5.
- ``pad_crop`` (CIFAR training): pad by 4 pixels of zeros and take a random ``out_hw`` window, i.e. a box
  of the output size whose corner lies at -4 .. +4 (integers) around the centred position; flip 0.5.
- ``center`` (evaluation): resize the shorter side to out / 0.875 and crop the centre (224 from 256): the
  largest box of the output's aspect ratio that fits in the image, scaled by 0.875, centred. No flip.
- ``none``: the whole frame, no flip (inference on frames at their own size, or a plain resize).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

KINDS = ("random_resized_crop", "pad_crop", "center", "none")

RRC_SCALE = (0.08, 1.0)
RRC_RATIO = (3.0 / 4.0, 4.0 / 3.0)
RRC_TRIES = 10
PAD = 4  # CIFAR's standard padding for pad_crop
CENTER_FRACTION = 0.875  # 224 / 256
FLIP_PROBABILITY = 0.5

# Stream numbers: each uniform a sample needs has its own, so adding one never shifts the others.
_STREAM_SCALE, _STREAM_RATIO, _STREAM_Y, _STREAM_X = 0, RRC_TRIES, 2 * RRC_TRIES, 3 * RRC_TRIES
_STREAM_FLIP = 4 * RRC_TRIES

_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


@dataclass(frozen=True)
class Draws:
    """Per sample: ``boxes`` float32 (N, 4) = (y0, x0, h, w) in source pixels, ``flips`` bool (N,)."""

    boxes: np.ndarray
    flips: np.ndarray

    def __len__(self) -> int:
        return len(self.flips)


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijective avalanche on uint64 (wrapping arithmetic is intended)."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _sample_keys(seed: int, epoch: int, indices: np.ndarray) -> np.ndarray:
    base = _mix64(np.array([seed & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))
    base = _mix64(base ^ np.uint64(epoch & 0xFFFFFFFFFFFFFFFF))
    return _mix64(base ^ indices.astype(np.uint64))


def uniforms(seed: int, epoch: int, indices: np.ndarray, streams: int) -> np.ndarray:
    """float64 (N, streams) uniform in [0, 1): column k is stream k of each sample's draw."""
    keys = _sample_keys(seed, epoch, np.asarray(indices))
    golden = np.uint64(0x9E3779B97F4A7C15)
    counters = (np.arange(1, streams + 1, dtype=np.uint64) * golden) & _MASK64
    bits = _mix64(keys[:, None] + counters[None, :])
    return (bits >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def _randint(u: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Integers uniform in [0, high] (inclusive) from uniforms u."""
    return np.minimum(np.floor(u * (high + 1)), high)


def _src_sizes(src_hw, n: int) -> tuple[np.ndarray, np.ndarray]:
    sizes = np.asarray(src_hw, dtype=np.float64)
    if sizes.shape == (2,):
        sizes = np.broadcast_to(sizes, (n, 2))
    if sizes.shape != (n, 2):
        raise ValueError(f"src_hw must be (H, W) or an (N, 2) array for {n} samples, got shape {sizes.shape}")
    if (sizes < 1).any():
        raise ValueError("src_hw: every source size must be at least 1x1")
    return sizes[:, 0], sizes[:, 1]


def _random_resized_crop(u: np.ndarray, height: np.ndarray, width: np.ndarray) -> np.ndarray:
    n = len(height)
    area = (height * width)[:, None]
    scale = RRC_SCALE[0] + (RRC_SCALE[1] - RRC_SCALE[0]) * u[:, _STREAM_SCALE:_STREAM_SCALE + RRC_TRIES]
    log_lo, log_hi = math.log(RRC_RATIO[0]), math.log(RRC_RATIO[1])
    ratio = np.exp(log_lo + (log_hi - log_lo) * u[:, _STREAM_RATIO:_STREAM_RATIO + RRC_TRIES])
    # round() as Python's (half to even), like torchvision's int(round(...)).
    w = np.round(np.sqrt(area * scale * ratio))
    h = np.round(np.sqrt(area * scale / ratio))
    fits = (w > 0) & (h > 0) & (w <= width[:, None]) & (h <= height[:, None])
    y0 = _randint(u[:, _STREAM_Y:_STREAM_Y + RRC_TRIES], height[:, None] - h)
    x0 = _randint(u[:, _STREAM_X:_STREAM_X + RRC_TRIES], width[:, None] - w)
    tries = np.stack([y0, x0, h, w], axis=-1)  # (N, tries, 4)
    first = np.argmax(fits, axis=1)
    boxes = tries[np.arange(n), first]
    # torchvision's fallback: the whole image, clamped to the ratio range, centred.
    in_ratio = width / height
    fb_w = np.where(in_ratio < RRC_RATIO[0], width,
                    np.where(in_ratio > RRC_RATIO[1], np.round(height * RRC_RATIO[1]), width))
    fb_h = np.where(in_ratio < RRC_RATIO[0], np.round(width / RRC_RATIO[0]), height)
    fallback = np.stack([(height - fb_h) // 2, (width - fb_w) // 2, fb_h, fb_w], axis=-1)
    return np.where(fits.any(axis=1)[:, None], boxes, fallback)


def _pad_crop(u: np.ndarray, height: np.ndarray, width: np.ndarray, out_hw: tuple[int, int]) -> np.ndarray:
    out_h, out_w = out_hw
    if (height + 2 * PAD < out_h).any() or (width + 2 * PAD < out_w).any():
        raise ValueError(f"pad_crop: output {out_h}x{out_w} is larger than the source padded by {PAD}")
    # Corner range: -PAD .. size + PAD - out (for CIFAR's 32 -> 32: -4 .. +4).
    y0 = -PAD + _randint(u[:, _STREAM_Y], height + 2 * PAD - out_h)
    x0 = -PAD + _randint(u[:, _STREAM_X], width + 2 * PAD - out_w)
    return np.stack([y0, x0, np.full_like(y0, out_h), np.full_like(x0, out_w)], axis=-1)


def _center(height: np.ndarray, width: np.ndarray, out_hw: tuple[int, int]) -> np.ndarray:
    out_h, out_w = out_hw
    fit = np.minimum(height / out_h, width / out_w) * CENTER_FRACTION  # source pixels per output pixel
    h, w = out_h * fit, out_w * fit
    return np.stack([(height - h) / 2, (width - w) / 2, h, w], axis=-1)


def crop_draws(seed: int, epoch: int, indices: np.ndarray, src_hw, kind: str, out_hw) -> Draws:
    """The crop boxes and flips of samples ``indices`` in ``epoch`` (see the module docstring)."""
    if kind not in KINDS:
        raise ValueError(f"augmentation kind {kind!r} is not one of {', '.join(KINDS)}")
    indices = np.asarray(indices, dtype=np.int64).reshape(-1)
    if (indices < 0).any():
        raise ValueError("crop_draws: sample indices must be non-negative")
    out_hw = (int(out_hw[0]), int(out_hw[1]))
    height, width = _src_sizes(src_hw, len(indices))
    n = len(indices)
    if kind == "none":
        boxes = np.stack([np.zeros(n), np.zeros(n), height, width], axis=-1)
        return Draws(boxes.astype(np.float32), np.zeros(n, dtype=bool))
    if kind == "center":
        return Draws(_center(height, width, out_hw).astype(np.float32), np.zeros(n, dtype=bool))
    u = uniforms(seed, epoch, indices, _STREAM_FLIP + 1)
    flips = u[:, _STREAM_FLIP] < FLIP_PROBABILITY
    if kind == "pad_crop":
        boxes = _pad_crop(u, height, width, out_hw)
    else:
        boxes = _random_resized_crop(u, height, width)
    return Draws(boxes.astype(np.float32), flips)


def sample_points(box: np.ndarray, out_hw: tuple[int, int], flip: bool) -> tuple[np.ndarray, np.ndarray]:
    """Source coordinates (float64) of the output rows and columns for one box, flip applied.

    The formula every ``prepare`` implements; used by the numpy reference and the tests.
    """
    y0, x0, h, w = (float(v) for v in box)
    ys = y0 + (np.arange(out_hw[0]) + 0.5) * h / out_hw[0] - 0.5
    xs = x0 + (np.arange(out_hw[1]) + 0.5) * w / out_hw[1] - 0.5
    return ys, (xs[::-1] if flip else xs)


def reference_prepare(images: np.ndarray, boxes: np.ndarray, flips: np.ndarray, out_hw: tuple[int, int],
                      mean, std) -> np.ndarray:
    """Slow float64 numpy implementation of ``prepare`` (NHWC out), pixel by pixel: the tests' yardstick."""
    n, src_h, src_w, channels = images.shape
    out = np.zeros((n, out_hw[0], out_hw[1], channels))
    for k in range(n):
        ys, xs = sample_points(boxes[k], out_hw, bool(flips[k]))
        for i, y in enumerate(ys):
            for j, x in enumerate(xs):
                if not (-0.5 <= y <= src_h - 0.5 and -0.5 <= x <= src_w - 0.5):
                    continue  # zero padding
                y, x = min(max(y, 0.0), src_h - 1.0), min(max(x, 0.0), src_w - 1.0)
                fy, fx = math.floor(y), math.floor(x)
                wy, wx = y - fy, x - fx
                fy1, fx1 = min(fy + 1, src_h - 1), min(fx + 1, src_w - 1)
                out[k, i, j] = ((1 - wy) * (1 - wx) * images[k, fy, fx] + (1 - wy) * wx * images[k, fy, fx1]
                                + wy * (1 - wx) * images[k, fy1, fx] + wy * wx * images[k, fy1, fx1])
    return (out / 255.0 - np.asarray(mean)) / np.asarray(std)


# --- what every framework's prepare() shares: argument resolution, decided on the host -----------------

DTYPE_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16",
                 "float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}


def dtype_name(dtype) -> str | None:
    """The canonical name of a compute dtype given as a string (``bf16``, ``float16``, ...), else None."""
    if isinstance(dtype, str):
        if dtype not in DTYPE_ALIASES:
            raise ValueError(f"compute dtype {dtype!r} is not one of {', '.join(DTYPE_ALIASES)}")
        return DTYPE_ALIASES[dtype]
    return None  # a framework dtype object: the backend takes it as it is


def normalise_constants(mean, std) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(scale, shift) with (x / 255 - mean) / std == x * scale - shift: every prepare() multiplies by the
    same float32 constants, where a division by a constant would be rewritten by XLA but not by eager code."""
    scale = tuple(1.0 / (255.0 * s) for s in std)
    shift = tuple(m / s for m, s in zip(mean, std))
    return scale, shift


@dataclass(frozen=True)
class PrepareArgs:
    """prepare()'s resolved arguments: ``identity`` when no resampling is needed (convert and normalise)."""

    identity: bool
    out_hw: tuple[int, int]
    boxes: object  # None when identity, else (N, 4) float32: numpy, or the caller's device array
    flips: object  # None when identity, else (N,) bool: numpy, or the caller's device array
    scale: tuple[float, ...]  # per channel: normalised = pixel * scale - shift (see normalise_constants)
    shift: tuple[float, ...]


def resolve_prepare_args(shape: tuple[int, ...], boxes, flips, out_hw, mean, std) -> PrepareArgs:
    """Check prepare()'s arguments against the NHWC batch ``shape`` and pick the fast path.

    ``boxes=None`` means the whole frame for every sample (and ``flips=None`` no flips). The identity fast
    path is taken only when that can be seen on the host -- boxes and flips None or numpy arrays equal to
    the whole frame without flips, at the source size -- so deciding it never waits for a device.
    """
    if len(shape) != 4 or any(v is None for v in shape[1:]):
        raise ValueError(f"prepare: images must be an NHWC batch with static H, W, C, got shape {tuple(shape)}")
    n = None if shape[0] is None else int(shape[0])  # TensorFlow may trace without a static batch size
    src_h, src_w, channels = (int(v) for v in shape[1:])
    out_hw = (src_h, src_w) if out_hw is None else (int(out_hw[0]), int(out_hw[1]))
    mean, std = tuple(float(v) for v in mean), tuple(float(v) for v in std)
    if len(mean) != channels or len(std) != channels:
        raise ValueError(f"prepare: mean/std have {len(mean)}/{len(std)} values for {channels} channels")
    whole_box = np.array([0.0, 0.0, src_h, src_w], dtype=np.float32)
    host_boxes = boxes is None or isinstance(boxes, np.ndarray)
    host_flips = flips is None or isinstance(flips, np.ndarray)
    if host_boxes and host_flips and out_hw == (src_h, src_w):
        no_crop = boxes is None or bool((np.asarray(boxes, dtype=np.float32) == whole_box).all())
        if no_crop and (flips is None or not np.asarray(flips).any()):
            return PrepareArgs(True, out_hw, None, None, *normalise_constants(mean, std))
    if (boxes is None or flips is None) and n is None:
        raise ValueError("prepare: pass boxes and flips when the batch size is not static")
    boxes = np.tile(whole_box, (n, 1)) if boxes is None else boxes
    flips = np.zeros(n, dtype=bool) if flips is None else flips
    batch = n if n is not None else boxes.shape[0]
    if tuple(boxes.shape)[1:] != (4,) or tuple(boxes.shape)[:1] != (batch,) or tuple(flips.shape) != (batch,):
        raise ValueError(f"prepare: boxes {tuple(boxes.shape)} / flips {tuple(flips.shape)} for a batch of {batch}")
    if isinstance(boxes, np.ndarray):
        boxes = boxes.astype(np.float32)
    if isinstance(flips, np.ndarray):
        flips = flips.astype(bool)
    return PrepareArgs(False, out_hw, boxes, flips, *normalise_constants(mean, std))
