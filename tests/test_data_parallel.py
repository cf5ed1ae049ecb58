"""Data parallelism is exact: one step on N devices equals one step on 1 device with the global batch.

Every backend runs in its own real process tree (torchrun + gloo, MirroredStrategy over logical
CPU devices, JAX over emulated CPU devices), from the same neutral weights and the same batch.
"""

from __future__ import annotations

import functools
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import pytest

from cnnbench.parity.probe import probe_run, random_weights, run_probe


def _batch(global_batch: int, size: int, channels: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((global_batch, channels, size, size)).astype(np.float32)
    y = rng.integers(0, 10, global_batch)
    return x, y


def _run_step(backend, strategy, model, devices, size, channels, sync_bn=False, batch=8, model_parallel=1,
              microbatches=1):
    x, y = _batch(batch, size, channels)
    run = probe_run(backend, strategy, model, devices=devices, image_size=size, channels=channels,
                    num_classes=10, global_batch=batch, lr=0.1, sync_bn=sync_bn, model_parallel=model_parallel,
                    microbatches=microbatches)
    return run_probe(run, random_weights(model, size, channels, 10), x, y, x[:2])


# Two probe processes at a time: each spends most of its life importing its framework and compiling.
_POOL = ThreadPoolExecutor(2)


@functools.cache
def _start(*args, **kwargs) -> Future:
    """One step in its own process tree, started now; the same arguments share one run per module."""
    return _POOL.submit(_run_step, *args, **kwargs)


def _steps(*started: Future) -> list:
    return [future.result() for future in started]


def _max_abs_diff(a: dict, b: dict, skip=()) -> float:
    assert list(a) == list(b)
    return max(float(np.max(np.abs(a[k] - b[k]))) for k in a if not k.endswith(skip))


@pytest.mark.parametrize("backend, strategy", [
    ("torch", "ddp"), ("tensorflow", "mirrored"), ("jax", "sharded"), ("jax", "pmap"),
])
def test_two_devices_equal_one_device_smallcnn(backend, strategy):
    one, two = _steps(
        _start(backend, strategy, "smallcnn", 1, 8, 1),
        _start(backend, strategy, "smallcnn", 2, 8, 1),
    )
    start = random_weights("smallcnn", 8, 1, 10)
    assert _max_abs_diff(one.weights, start) > 1e-3  # the step did move the weights
    assert _max_abs_diff(one.weights, two.weights) <= 1e-5


# resnet18_cifar at 16x16 with 16 images: at 8x8 the last stage normalises over too few values
# (1x1 spatial) and float32 reduction order alone moves one step's weights by ~1e-2.
RESNET = ("resnet18_cifar", 16, 3)


@pytest.mark.parametrize("strategy", ["sharded", "pmap"])
def test_jax_sync_bn_two_devices_equal_one_device(strategy):
    # On one device local and synchronized statistics are the same computation: one reference.
    one, two = _steps(
        _start("jax", "sharded", *RESNET[:1], 1, *RESNET[1:], batch=16),
        _start("jax", strategy, *RESNET[:1], 2, *RESNET[1:], sync_bn=True, batch=16),
    )
    # All trained tensors and the running mean agree; the running variance too (biased, global).
    assert _max_abs_diff(one.weights, two.weights) <= 1e-5


def test_jax_local_bn_differs_from_sync_bn():
    """Local statistics are really per device: with BN, 2 local devices differ from 1 device."""
    one, local, pmap_local = _steps(
        _start("jax", "sharded", *RESNET[:1], 1, *RESNET[1:], batch=16),
        _start("jax", "sharded", *RESNET[:1], 2, *RESNET[1:], batch=16),
        _start("jax", "pmap", *RESNET[:1], 2, *RESNET[1:], batch=16),
    )
    assert _max_abs_diff(one.weights, local.weights) > 1e-4
    # ...and the two strategies implement the same local-BN semantics.
    assert _max_abs_diff(local.weights, pmap_local.weights) <= 1e-5


# -- model parallelism: the same one-step update as one device ------------------------------------


def test_jax_tensor_parallel_resnet_equals_one_device():
    """Channels sharded over 2 devices (kernels by output channel, BN by channel): XLA's collectives
    reproduce the single-device step, batch norm included (all shards see the whole batch)."""
    one, tensor = _steps(
        _start("jax", "sharded", *RESNET[:1], 1, *RESNET[1:], batch=16),
        _start("jax", "tensor", *RESNET[:1], 2, *RESNET[1:], batch=16),
    )
    assert _max_abs_diff(one.weights, tensor.weights) <= 1e-5


def test_jax_data_plus_tensor_on_a_2x2_mesh_equals_one_device():
    one, mesh = _steps(
        _start("jax", "sharded", "smallcnn", 1, 8, 1),
        _start("jax", "data+tensor", "smallcnn", 4, 8, 1, model_parallel=2),
    )
    assert _max_abs_diff(one.weights, mesh.weights) <= 1e-5


# Each framework's pipeline against its own one-device data-parallel step.
PIPELINES = [("torch", "ddp"), ("jax", "sharded")]


@pytest.mark.parametrize("backend, one_device", PIPELINES)
def test_pipeline_of_micro_batches_equals_one_device(backend, one_device):
    """Two stages on two devices, four micro-batches (GPipe): the gradients, scaled by the
    micro-batch count and summed, are the whole batch's."""
    one, pipe = _steps(
        _start(backend, one_device, "smallcnn", 1, 8, 1),
        _start(backend, "pipeline", "smallcnn", 2, 8, 1, microbatches=4),
    )
    assert _max_abs_diff(one.weights, pipe.weights) <= 1e-5
    assert np.abs(one.logits - pipe.logits).max() <= 1e-5


@pytest.mark.parametrize("backend, one_device", PIPELINES)
def test_pipeline_resnet_with_one_micro_batch_equals_one_device(backend, one_device):
    """With batch norm, one micro-batch normalises like the whole batch: running statistics too
    (they also prove that no stage ran an extra training-mode forward)."""
    one, pipe = _steps(
        _start(backend, one_device, *RESNET[:1], 1, *RESNET[1:], batch=16),
        _start(backend, "pipeline", *RESNET[:1], 2, *RESNET[1:], batch=16, microbatches=1),
    )
    assert _max_abs_diff(one.weights, pipe.weights) <= 1e-5


def test_jax_and_torch_pipelines_normalise_micro_batches_alike():
    """With batch norm and 2 micro-batches both pipelines normalise each micro-batch alone and update
    the running mean once per micro-batch: far from the whole-batch step, equal to each other up to
    float32 noise (a single device with batch 8 differs across the frameworks by ~7e-4 here). One
    stage each: the stage count does not change the arithmetic (the tests above)."""
    whole, jax_pipe, torch_pipe = _steps(
        _start("jax", "sharded", *RESNET[:1], 1, *RESNET[1:], batch=16),
        _start("jax", "pipeline", *RESNET[:1], 1, *RESNET[1:], batch=16, microbatches=2),
        _start("torch", "pipeline", *RESNET[:1], 1, *RESNET[1:], batch=16, microbatches=2),
    )
    # PyTorch keeps the unbiased running variance; the running means and every trained tensor compare.
    assert _max_abs_diff(jax_pipe.weights, torch_pipe.weights, skip=("running_var",)) <= 2e-3
    assert _max_abs_diff(jax_pipe.weights, whole.weights, skip=("running_var",)) > 0.05
