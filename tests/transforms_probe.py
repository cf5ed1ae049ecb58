"""Run as a script in its own process: `python tests/transforms_probe.py FRAMEWORK OUT.npz [cpu|gpu]`.

FRAMEWORK is torch, jax or tensorflow; the batch is put on the CPU (default) or the first GPU.
Builds the same uint8 batches (crops of scikit-image photographs, and random noise) and the same
crop_draws, runs that framework's ``prepare`` on each case -- eagerly, and compiled (torch.compile
fullgraph, tf.function with XLA and no static batch size, an outer jax.jit) with the draws as device
arrays -- and saves every output as float32 NHWC, with the inputs, for tests/test_transforms.py.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from cnnbench.data.augment import crop_draws
from cnnbench.data.normalize import IMAGENET_MEAN, IMAGENET_STD


def photo_batch(n: int, size_hw: tuple[int, int]) -> np.ndarray:
    from cnnbench.data.samples import PHOTOS, photo, random_view

    rng = np.random.default_rng(0)
    return np.stack([random_view(photo(PHOTOS[k % len(PHOTOS)]), size_hw, rng) for k in range(n)])


def cases() -> dict[str, dict]:
    """name -> images, boxes (None: whole frame), flips, out_hw, dtype."""
    photos = photo_batch(4, (75, 100))
    cifar = photo_batch(4, (32, 32))
    noise = np.random.default_rng(1).integers(0, 256, (3, 40, 50, 3), dtype=np.uint8)
    rrc = crop_draws(0, 0, np.arange(4), (75, 100), "random_resized_crop", (40, 56))
    pad = crop_draws(0, 3, np.arange(4), (32, 32), "pad_crop", (32, 32))
    center = crop_draws(0, 0, np.arange(4), (75, 100), "center", (32, 32))
    noisy = crop_draws(5, 0, np.arange(3), (40, 50), "random_resized_crop", (24, 24))
    assert rrc.flips.any() and not rrc.flips.all() and pad.flips.any()
    return {
        "rrc": dict(images=photos, boxes=rrc.boxes, flips=rrc.flips, out_hw=(40, 56), dtype="float32"),
        "pad_crop": dict(images=cifar, boxes=pad.boxes, flips=pad.flips, out_hw=(32, 32), dtype="float32"),
        "center": dict(images=photos, boxes=center.boxes, flips=center.flips, out_hw=(32, 32), dtype="float32"),
        "identity": dict(images=photos, boxes=None, flips=None, out_hw=None, dtype="float32"),
        "resize_up": dict(images=photos, boxes=None, flips=None, out_hw=(90, 160), dtype="float32"),
        "noise": dict(images=noise, boxes=noisy.boxes, flips=noisy.flips, out_hw=(24, 24), dtype="float32"),
        "rrc_bf16": dict(images=photos, boxes=rrc.boxes, flips=rrc.flips, out_hw=(40, 56), dtype="bf16"),
    }


def run_torch(case: dict, compiled: bool, device: str) -> tuple[np.ndarray, str]:
    import torch

    from backends.torch.transforms import prepare

    images = torch.from_numpy(case["images"]).to("cuda" if device == "gpu" else "cpu")
    boxes, flips = case["boxes"], case["flips"]
    fn = prepare
    if compiled:
        boxes, flips = torch.from_numpy(boxes), torch.from_numpy(flips)
        fn = torch.compile(prepare, fullgraph=True, backend="aot_eager")  # traced whole, no graph break
    out = fn(images, boxes, flips, case["out_hw"], IMAGENET_MEAN, IMAGENET_STD, case["dtype"], channels_last=True)
    assert out.is_contiguous(memory_format=torch.channels_last) and out.shape[1] == 3
    assert out.device == images.device
    return out.permute(0, 2, 3, 1).float().cpu().numpy(), str(out.dtype).removeprefix("torch.")


def torch_grid_sample(case: dict) -> np.ndarray:
    """The same sampling through torch's grid_sample (align_corners=False, border clamp, masked outside).

    Kept as evidence that the gather formulation is grid_sample's: pixel x sits at normalised
    (2x + 1) / W - 1, and 'border' padding plus the outside mask gives the zero padding.
    """
    import torch
    import torch.nn.functional as F

    from cnnbench.data.augment import sample_points

    images = torch.from_numpy(case["images"]).permute(0, 3, 1, 2).double()
    n, _, height, width = images.shape
    grids, masks = [], []
    for box, flip in zip(case["boxes"], case["flips"]):
        ys, xs = (torch.from_numpy(v.copy()) for v in sample_points(box, case["out_hw"], bool(flip)))
        gy, gx = torch.meshgrid((2 * ys + 1) / height - 1, (2 * xs + 1) / width - 1, indexing="ij")
        grids.append(torch.stack([gx, gy], dim=-1))
        masks.append(((ys >= -0.5) & (ys <= height - 0.5))[:, None] & ((xs >= -0.5) & (xs <= width - 0.5))[None, :])
    out = F.grid_sample(images, torch.stack(grids), mode="bilinear", padding_mode="border", align_corners=False)
    out = out.permute(0, 2, 3, 1) * torch.stack(masks)[..., None]
    mean, std = torch.tensor(IMAGENET_MEAN, dtype=torch.float64), torch.tensor(IMAGENET_STD, dtype=torch.float64)
    return ((out / 255.0 - mean) / std).float().numpy()


def run_jax(case: dict, compiled: bool, device: str) -> tuple[np.ndarray, str]:
    import jax
    import jax.numpy as jnp

    from backends.jax.transforms import prepare

    images = jax.device_put(case["images"], jax.devices()[0])
    assert images.devices().pop().platform == device
    if compiled:
        def fn(i, b, f):
            return prepare(i, b, f, case["out_hw"], IMAGENET_MEAN, IMAGENET_STD, case["dtype"])
        out = jax.jit(fn)(images, jnp.asarray(case["boxes"]), jnp.asarray(case["flips"]))
    else:
        out = prepare(images, case["boxes"], case["flips"], case["out_hw"], IMAGENET_MEAN, IMAGENET_STD, case["dtype"])
    return np.asarray(out.astype(jnp.float32)), str(out.dtype)


def run_tensorflow(case: dict, compiled: bool, device: str) -> tuple[np.ndarray, str]:
    import tensorflow as tf

    from backends.tensorflow.transforms import prepare

    with tf.device("/GPU:0" if device == "gpu" else "/CPU:0"):
        images = tf.identity(tf.constant(case["images"]))
    if compiled:
        def fn(i, b, f):
            return prepare(i, b, f, case["out_hw"], IMAGENET_MEAN, IMAGENET_STD, case["dtype"])
        # Traced without a static batch size, as a tf.data pipeline without drop_remainder gives it.
        signature = [tf.TensorSpec([None, *images.shape[1:]], tf.uint8), tf.TensorSpec([None, 4], tf.float32),
                     tf.TensorSpec([None], tf.bool)]
        compiled_fn = tf.function(fn, jit_compile=True, input_signature=signature)
        out = compiled_fn(images, tf.constant(case["boxes"]), tf.constant(case["flips"]))
    else:
        out = prepare(images, case["boxes"], case["flips"], case["out_hw"], IMAGENET_MEAN, IMAGENET_STD, case["dtype"])
    return tf.cast(out, tf.float32).numpy(), out.dtype.name


if __name__ == "__main__":
    framework, out_path = sys.argv[1], sys.argv[2]
    device = sys.argv[3] if len(sys.argv) > 3 else "cpu"
    if device == "cpu":
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    runner = {"torch": run_torch, "jax": run_jax, "tensorflow": run_tensorflow}[framework]
    saved = {}
    for name, case in cases().items():
        saved[f"in:{name}"] = case["images"]
        for compiled in (False, True):
            if compiled and case["boxes"] is None:
                continue  # whole-frame cases decide their fast path on the host: nothing to compile apart
            out, dtype = runner(case, compiled, device)
            key = f"{name}:{'compiled' if compiled else 'eager'}"
            saved[f"out:{key}"], saved[f"dtype:{key}"] = out, np.array(dtype)
        if framework == "torch" and case["boxes"] is not None and case["dtype"] == "float32":
            saved[f"grid_sample:{name}"] = torch_grid_sample(case)
    np.savez(out_path, **saved)
