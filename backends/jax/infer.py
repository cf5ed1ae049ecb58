"""JAX/Flax inference model for `cnnbench infer`: a jitted forward pass on one device.

One model takes every input: float32 NHWC (on the device already, or copied from host memory,
pinned through the device's ``pinned_host`` memory kind, or a plain numpy array), or uint8 NHWC
pixels from pinned host memory, copied as uint8 by ``device_put`` and converted and normalised
inside the jitted function (``forward_uint8``)."""

from __future__ import annotations

import contextlib
import resource
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from backends import profilers
from backends.jax.models import build_model
from cnnbench import envinfo
from cnnbench.data.normalize import channel_scale_shift
from cnnbench.runs import Run, Variant


class JaxInference:
    def __init__(self, run: Run, variant: Variant) -> None:
        self.on_gpu = run.device_kind == "gpu"
        self.device = jax.devices()[0]
        dtype = {"bf16": jnp.bfloat16, "fp16": jnp.float16}.get(variant.precision, jnp.float32)
        model = build_model(run.model, run.num_classes, dtype)
        shape = (1, *run.image_size, run.channels)
        variables = jax.jit(lambda key: model.init(key, jnp.zeros(shape), train=False))(jax.random.key(run.seed))
        self.variables = jax.device_put(variables, self.device)
        scale, shift = (jnp.asarray(v) for v in channel_scale_shift(run.channels))
        self.forward = jax.jit(lambda v, x: model.apply(v, x, train=False))
        self.forward_uint8 = jax.jit(lambda v, pixels: model.apply(v, normalize_uint8(pixels, scale, shift),
                                                                   train=False))
        self.input = variant.input
        # Page-locked host memory that the device copies from directly (a GPU's `pinned_host`
        # memory kind); the copy from it then has to name the device memory explicitly.
        kinds = {memory.kind for memory in self.device.addressable_memories()}
        self.pinned_host = (jax.sharding.SingleDeviceSharding(self.device, memory_kind="pinned_host")
                            if "pinned_host" in kinds else None)
        self.on_device = jax.sharding.SingleDeviceSharding(self.device, memory_kind="device")
        self._last = None

    def host_batch(self, images: np.ndarray, input: str | None = None):
        """(array, whether it is on the device already, whether it is uint8 pixels)."""
        source = input or self.input
        if source.startswith("uint8"):  # uint8 NHWC pixels as they are
            nhwc = np.ascontiguousarray(images)
        else:
            nhwc = np.ascontiguousarray(images.transpose(0, 2, 3, 1))
        if source == "resident":
            return jax.device_put(nhwc, self.device), True, False
        if not source.endswith("_pinned"):
            return nhwc, False, nhwc.dtype == np.uint8
        if self.pinned_host is None:
            raise RuntimeError(f"{self.device} has no pinned_host memory kind for input {source}")
        return jax.device_put(nhwc, self.pinned_host), False, nhwc.dtype == np.uint8

    def infer(self, host_batch):
        batch, resident, pixels = host_batch
        if not resident:
            batch = jax.device_put(batch, self.on_device if isinstance(batch, jax.Array) else self.device)
        self._last = (self.forward_uint8 if pixels else self.forward)(self.variables, batch)
        return self._last

    def fetch(self, output) -> np.ndarray:
        return np.asarray(output, dtype=np.float32)

    def sync(self) -> None:
        # One device runs its computations in order: the newest output is ready last.
        if self._last is not None:
            jax.block_until_ready(self._last)

    def profiler(self, directory: Path) -> contextlib.AbstractContextManager:
        return profilers.jax_trace(directory)

    def device_name(self) -> str:
        return self.device.device_kind if self.on_gpu else envinfo.cpu_name()

    def peak_memory_bytes(self) -> int | None:
        stats = self.device.memory_stats() if self.on_gpu else None
        if stats:
            return int(stats.get("peak_bytes_in_use", 0))
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def normalize_uint8(pixels: jax.Array, scale: jax.Array, shift: jax.Array) -> jax.Array:
    """uint8 (N, H, W, C) -> normalised float32 NHWC, inside the jitted forward: the device form
    of :func:`cnnbench.data.normalize.normalize_uint8_nhwc` (which also moves channels first)."""
    return pixels.astype(jnp.float32) * scale + shift
