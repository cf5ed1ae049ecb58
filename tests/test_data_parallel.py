"""Data parallelism is exact: one step on N devices equals one step on 1 device with the global batch.

Every backend runs in its own real process tree (torchrun + gloo, MirroredStrategy over logical
CPU devices, JAX over emulated CPU devices), from the same neutral weights and the same batch.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from cnnbench.probe import probe_run, random_weights, run_probe


def _batch(global_batch: int, size: int, channels: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((global_batch, channels, size, size)).astype(np.float32)
    y = rng.integers(0, 10, global_batch)
    return x, y


@functools.cache
def _step(backend, strategy, model, devices, size, channels, sync_bn=False, batch=8):
    x, y = _batch(batch, size, channels)
    run = probe_run(backend, strategy, model, devices=devices, image_size=size, channels=channels,
                    num_classes=10, global_batch=batch, lr=0.1, sync_bn=sync_bn)
    return run_probe(run, random_weights(model, size, channels, 10), x, y, x[:2])


def _max_abs_diff(a: dict, b: dict, skip=()) -> float:
    assert list(a) == list(b)
    return max(float(np.max(np.abs(a[k] - b[k]))) for k in a if not k.endswith(skip))


@pytest.mark.parametrize("backend, strategy", [
    ("torch", "ddp"), ("tensorflow", "mirrored"), ("jax", "sharded"), ("jax", "pmap"),
])
def test_two_devices_equal_one_device_smallcnn(backend, strategy):
    one = _step(backend, strategy, "smallcnn", 1, 8, 1)
    two = _step(backend, strategy, "smallcnn", 2, 8, 1)
    start = random_weights("smallcnn", 8, 1, 10)
    assert _max_abs_diff(one.weights, start) > 1e-3  # the step did move the weights
    assert _max_abs_diff(one.weights, two.weights) <= 1e-5


# resnet18_cifar at 16x16 with 16 images: at 8x8 the last stage normalises over too few values
# (1x1 spatial) and float32 reduction order alone moves one step's weights by ~1e-2.
RESNET = ("resnet18_cifar", 16, 3)


@pytest.mark.parametrize("strategy", ["sharded", "pmap"])
def test_jax_sync_bn_two_devices_equal_one_device(strategy):
    # On one device local and synchronized statistics are the same computation: one reference.
    one = _step("jax", "sharded", *RESNET[:1], 1, *RESNET[1:], batch=16)
    two = _step("jax", strategy, *RESNET[:1], 2, *RESNET[1:], sync_bn=True, batch=16)
    # All trained tensors and the running mean agree; the running variance too (biased, global).
    assert _max_abs_diff(one.weights, two.weights) <= 1e-5


def test_jax_local_bn_differs_from_sync_bn():
    """Local statistics are really per device: with BN, 2 local devices differ from 1 device."""
    one = _step("jax", "sharded", *RESNET[:1], 1, *RESNET[1:], batch=16)
    local = _step("jax", "sharded", *RESNET[:1], 2, *RESNET[1:], batch=16)
    pmap_local = _step("jax", "pmap", *RESNET[:1], 2, *RESNET[1:], batch=16)
    assert _max_abs_diff(one.weights, local.weights) > 1e-4
    # ...and the two strategies implement the same local-BN semantics.
    assert _max_abs_diff(local.weights, pmap_local.weights) <= 1e-5
