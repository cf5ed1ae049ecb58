"""On-device input preparation for PyTorch: crop + resize + flip + normalise a uint8 NHWC batch.

The sampling is the one ``cnnbench.data.augment`` defines (and JAX's and TensorFlow's ``prepare``
implement the same way): output pixel (i, j) of a box (y0, x0, h, w) samples the source at
y = y0 + (i + 0.5) h / H_out - 0.5 (x likewise), bilinearly, zero outside the image's area, edge pixel
within half a pixel of it. It is separable, so it runs as two gathers (rows, then columns) of the uint8
batch -- no float copy of the full-size frame is made when cropping -- each followed by a lerp.
``grid_sample`` could express the same sampling but needs the whole source batch as float first.

Plain tensor ops with static shapes: usable eagerly, under ``torch.compile(fullgraph=True)``, on CPU or
CUDA (the device is the images').
"""

from __future__ import annotations

from functools import lru_cache

import torch

from cnnbench.data.augment import dtype_name, resolve_prepare_args
from cnnbench.data.normalize import IMAGENET_MEAN, IMAGENET_STD

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _axis_taps(start: torch.Tensor, length: torch.Tensor, out: int, size: int, flips: torch.Tensor | None):
    """For one axis: lower/upper source indices (N, out), lerp weights and the inside-the-image mask."""
    # y0 + (i + 0.5) * h / out - 0.5 as y0 + ((2i + 1) h - out) * (0.5 / out): whole-pixel boxes sample
    # pixel centres exactly, and a multiply by a constant (which XLA would make of a division anyway)
    # keeps the frameworks' coordinates equal to the last bit.
    odd = 2.0 * torch.arange(out, device=start.device, dtype=torch.float32) + 1.0
    coords = start[:, None] + (odd[None, :] * length[:, None] - out) * (0.5 / out)
    if flips is not None:
        coords = torch.where(flips[:, None], coords.flip(1), coords)
    inside = (coords >= -0.5) & (coords <= size - 0.5)
    coords = coords.clamp(0.0, size - 1.0)
    low = coords.floor()
    weight = coords - low
    low = low.long()
    high = (low + 1).clamp(max=size - 1)
    return low, high, weight, inside


def _crop_resize(images: torch.Tensor, boxes: torch.Tensor, flips: torch.Tensor, out_hw: tuple[int, int]):
    n, height, width, _ = images.shape
    out_h, out_w = out_hw
    y_low, y_high, wy, y_in = _axis_taps(boxes[:, 0], boxes[:, 2], out_h, height, None)
    x_low, x_high, wx, x_in = _axis_taps(boxes[:, 1], boxes[:, 3], out_w, width, flips)
    batch = torch.arange(n, device=images.device)
    top = images[batch[:, None], y_low].float()  # (N, H_out, W, C)
    bottom = images[batch[:, None], y_high].float()
    rows = top + (bottom - top) * wy[:, :, None, None]
    row_index = torch.arange(out_h, device=images.device)[None, :, None]
    left = rows[batch[:, None, None], row_index, x_low[:, None, :]]  # (N, H_out, W_out, C)
    right = rows[batch[:, None, None], row_index, x_high[:, None, :]]
    out = left + (right - left) * wx[:, None, :, None]
    return out * (y_in[:, :, None] & x_in[:, None, :])[..., None]


def _normalise_tensors(device: torch.device, scale: tuple[float, ...], shift: tuple[float, ...]):
    if torch.compiler.is_compiling():
        return _make_normalise_tensors(device, scale, shift)  # graph constants
    return _cached_normalise_tensors(device, scale, shift)


def _make_normalise_tensors(device: torch.device, scale: tuple[float, ...], shift: tuple[float, ...]):
    return (torch.tensor(scale, dtype=torch.float32, device=device),
            torch.tensor(shift, dtype=torch.float32, device=device))


# Eagerly, made once per device: a fresh torch.tensor(..., device="cuda") each step would be a pageable
# copy, which makes the host wait for the GPU's queue.
_cached_normalise_tensors = lru_cache(maxsize=32)(_make_normalise_tensors)


def _to_device(value, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Draws from the host to the images' device without making the host wait for the GPU."""
    tensor = torch.as_tensor(value).to(dtype)
    if device.type == "cuda" and tensor.device.type == "cpu" and not torch.compiler.is_compiling():
        tensor = tensor.pin_memory()  # a non_blocking copy is only asynchronous from pinned memory
    return tensor.to(device, non_blocking=True)


def prepare(images: torch.Tensor, boxes=None, flips=None, out_hw=None, mean=IMAGENET_MEAN, std=IMAGENET_STD,
            dtype="float32", channels_last: bool = False) -> torch.Tensor:
    """uint8 NHWC ``images`` (on their device) -> normalised NCHW ``dtype`` batch of ``out_hw``.

    ``boxes`` (N, 4) float (y0, x0, h, w) and ``flips`` (N,) bool come from ``crop_draws``, as numpy
    arrays or tensors; None means the whole frame, unflipped. With ``channels_last`` the NCHW result has
    channels-last strides (what a channels_last model wants; no copy is made), else it is contiguous.
    """
    args = resolve_prepare_args(tuple(images.shape), boxes, flips, out_hw, mean, std)
    device = images.device
    if args.identity:
        x = images.float()  # the fast path: no resampling, just convert and normalise
    else:
        boxes_t = _to_device(args.boxes, torch.float32, device)
        flips_t = _to_device(args.flips, torch.bool, device)
        x = _crop_resize(images, boxes_t, flips_t, args.out_hw)
    scale, shift = _normalise_tensors(device, args.scale, args.shift)
    x = x * scale - shift  # (x / 255 - mean) / std
    name = dtype_name(dtype)
    x = x.to(_DTYPES[name] if name else dtype).permute(0, 3, 1, 2)  # NCHW view with channels-last strides
    return x if channels_last else x.contiguous()
