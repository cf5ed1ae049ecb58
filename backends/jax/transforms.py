"""On-device input preparation for JAX: crop + resize + flip + normalise a uint8 NHWC batch, jitted.

The sampling is the one ``cnnbench.data.augment`` defines, implemented as in PyTorch's and TensorFlow's
``prepare``: two separable gathers of the uint8 batch (rows, then columns), each followed by a lerp, zero
outside the image's area, edge pixel within half a pixel of it. ``jax.image.scale_and_translate`` is
not used: its linear kernel antialiases when shrinking and has no zero padding, so it would neither
match the other frameworks nor do the CIFAR pad-crop.

``prepare`` is a jitted function of static output size, dtype and statistics; it works inside another
``jit`` too, on whatever device holds the images.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

from cnnbench.data.augment import dtype_name, resolve_prepare_args
from cnnbench.data.normalize import IMAGENET_MEAN, IMAGENET_STD


def _axis_taps(start, length, out: int, size: int, flips):
    """For one axis: lower/upper source indices (N, out), lerp weights and the inside-the-image mask."""
    # y0 + (i + 0.5) * h / out - 0.5 as y0 + ((2i + 1) h - out) * (0.5 / out): whole-pixel boxes sample
    # pixel centres exactly, and a multiply by a constant (which XLA would make of a division anyway)
    # keeps the frameworks' coordinates equal to the last bit.
    odd = 2.0 * jnp.arange(out, dtype=jnp.float32) + 1.0
    coords = start[:, None] + (odd[None, :] * length[:, None] - out) * (0.5 / out)
    if flips is not None:
        coords = jnp.where(flips[:, None], coords[:, ::-1], coords)
    inside = (coords >= -0.5) & (coords <= size - 0.5)
    coords = jnp.clip(coords, 0.0, size - 1.0)
    low = jnp.floor(coords)
    weight = coords - low
    low = low.astype(jnp.int32)
    high = jnp.minimum(low + 1, size - 1)
    return low, high, weight, inside


def _crop_resize(images, boxes, flips, out_hw: tuple[int, int]):
    n, height, width, _ = images.shape
    out_h, out_w = out_hw
    y_low, y_high, wy, y_in = _axis_taps(boxes[:, 0], boxes[:, 2], out_h, height, None)
    x_low, x_high, wx, x_in = _axis_taps(boxes[:, 1], boxes[:, 3], out_w, width, flips)
    batch = jnp.arange(n)
    top = images[batch[:, None], y_low].astype(jnp.float32)  # (N, H_out, W, C)
    bottom = images[batch[:, None], y_high].astype(jnp.float32)
    rows = top + (bottom - top) * wy[:, :, None, None]
    row_index = jnp.arange(out_h)[None, :, None]
    left = rows[batch[:, None, None], row_index, x_low[:, None, :]]  # (N, H_out, W_out, C)
    right = rows[batch[:, None, None], row_index, x_high[:, None, :]]
    out = left + (right - left) * wx[:, None, :, None]
    return out * (y_in[:, :, None] & x_in[:, None, :])[..., None]


@partial(jax.jit, static_argnames=("out_hw", "scale", "shift", "dtype", "identity"))
def _prepare(images, boxes, flips, *, out_hw, scale, shift, dtype, identity):
    if identity:
        x = images.astype(jnp.float32)  # the fast path: no resampling, just convert and normalise
    else:
        x = _crop_resize(images, jnp.asarray(boxes, jnp.float32), jnp.asarray(flips, bool), out_hw)
    x = x * jnp.asarray(scale, jnp.float32) - jnp.asarray(shift, jnp.float32)  # (x / 255 - mean) / std
    return x.astype(dtype)


def prepare(images, boxes=None, flips=None, out_hw=None, mean=IMAGENET_MEAN, std=IMAGENET_STD, dtype="float32",
            channels_last: bool = True):
    """uint8 NHWC ``images`` (a jax array on its device) -> normalised NHWC ``dtype`` batch of ``out_hw``.

    ``boxes`` (N, 4) float (y0, x0, h, w) and ``flips`` (N,) bool come from ``crop_draws`` (numpy or jax
    arrays); None means the whole frame, unflipped. JAX models take NHWC, so ``channels_last`` must stay
    True (it is accepted for a signature shared with PyTorch's ``prepare``).
    """
    if not channels_last:
        raise ValueError("JAX prepare: the batch is NHWC (channels last) for the Flax models")
    args = resolve_prepare_args(tuple(images.shape), boxes, flips, out_hw, mean, std)
    name = dtype_name(dtype)
    # Host boxes go in as numpy: jit places them with the images (sharded or not), no extra transfer step.
    return _prepare(images, args.boxes, args.flips, out_hw=args.out_hw, scale=args.scale, shift=args.shift,
                    dtype=jnp.dtype(name if name else dtype), identity=args.identity)
