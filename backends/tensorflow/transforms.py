"""On-device input preparation for TensorFlow: crop + resize + flip + normalise a uint8 NHWC batch.

The sampling is the one ``cnnbench.data.augment`` defines, implemented as in PyTorch's and JAX's
``prepare``: two separable ``tf.gather``s of the uint8 batch (rows, then columns, ``batch_dims=1``), each
followed by a lerp, zero outside the image's area, edge pixel within half a pixel of it.
``tf.image.crop_and_resize`` is not used: it takes normalised box corners and samples with
align-corners spacing (y = y1 + i (y2 - y1) / (H_out - 1)), not at pixel centres, and extrapolates with
one constant instead of padding with zeros, so its crops are shifted and scaled against the others'.

Plain ops on static shapes: eager, inside ``tf.function`` (with or without ``jit_compile``), on the
device scope the caller sets.
"""

from __future__ import annotations

import tensorflow as tf

from cnnbench.data.augment import dtype_name, resolve_prepare_args
from cnnbench.data.normalize import IMAGENET_MEAN, IMAGENET_STD


def _axis_taps(start, length, out: int, size: int, flips):
    """For one axis: lower/upper source indices (N, out), lerp weights and the inside-the-image mask."""
    # y0 + (i + 0.5) * h / out - 0.5 as y0 + ((2i + 1) h - out) * (0.5 / out): whole-pixel boxes sample
    # pixel centres exactly, and a multiply by a constant (which XLA would make of a division anyway)
    # keeps the frameworks' coordinates equal to the last bit.
    odd = 2.0 * tf.range(out, dtype=tf.float32) + 1.0
    coords = start[:, None] + (odd[None, :] * length[:, None] - out) * (0.5 / out)
    if flips is not None:
        coords = tf.where(flips[:, None], coords[:, ::-1], coords)
    inside = (coords >= -0.5) & (coords <= size - 0.5)
    coords = tf.clip_by_value(coords, 0.0, size - 1.0)
    low = tf.floor(coords)
    weight = coords - low
    low = tf.cast(low, tf.int32)
    high = tf.minimum(low + 1, size - 1)
    return low, high, weight, inside


def _crop_resize(images, boxes, flips, out_hw: tuple[int, int]):
    _, height, width, _ = images.shape
    out_h, out_w = out_hw
    y_low, y_high, wy, y_in = _axis_taps(boxes[:, 0], boxes[:, 2], out_h, height, None)
    x_low, x_high, wx, x_in = _axis_taps(boxes[:, 1], boxes[:, 3], out_w, width, flips)
    top = tf.cast(tf.gather(images, y_low, axis=1, batch_dims=1), tf.float32)  # (N, H_out, W, C)
    bottom = tf.cast(tf.gather(images, y_high, axis=1, batch_dims=1), tf.float32)
    rows = top + (bottom - top) * wy[:, :, None, None]
    left = tf.gather(rows, x_low, axis=2, batch_dims=1)  # (N, H_out, W_out, C)
    right = tf.gather(rows, x_high, axis=2, batch_dims=1)
    out = left + (right - left) * wx[:, None, :, None]
    mask = tf.cast(y_in[:, :, None] & x_in[:, None, :], tf.float32)
    return out * mask[..., None]


def prepare(images, boxes=None, flips=None, out_hw=None, mean=IMAGENET_MEAN, std=IMAGENET_STD, dtype="float32",
            channels_last: bool = True):
    """uint8 NHWC ``images`` -> normalised NHWC ``dtype`` batch of ``out_hw`` (static H, W, C; the batch
    size may be unknown while tracing).

    ``boxes`` (N, 4) float (y0, x0, h, w) and ``flips`` (N,) bool come from ``crop_draws`` (numpy arrays
    or tensors); None means the whole frame, unflipped. Keras models here take NHWC, so
    ``channels_last`` must stay True (accepted for a signature shared with PyTorch's ``prepare``).
    """
    if not channels_last:
        raise ValueError("TensorFlow prepare: the batch is NHWC (channels last) for the Keras models")
    images = tf.convert_to_tensor(images)
    if images.shape.rank != 4:
        raise ValueError(f"TensorFlow prepare: images must be an NHWC batch, got shape {images.shape}")
    args = resolve_prepare_args(tuple(images.shape.as_list()), boxes, flips, out_hw, mean, std)
    if args.identity:
        x = tf.cast(images, tf.float32)  # the fast path: no resampling, just convert and normalise
    else:
        boxes_t = tf.cast(tf.convert_to_tensor(args.boxes), tf.float32)
        flips_t = tf.cast(tf.convert_to_tensor(args.flips), tf.bool)
        x = _crop_resize(images, boxes_t, flips_t, args.out_hw)
    x = x * tf.constant(args.scale, tf.float32) - tf.constant(args.shift, tf.float32)  # (x / 255 - mean) / std
    name = dtype_name(dtype)
    return tf.cast(x, tf.as_dtype(name) if name else dtype)
