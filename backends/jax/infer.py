"""JAX/Flax inference model for `cnnbench infer`: a jitted forward pass on one device."""

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
from cnnbench.infer.plan import Variant
from cnnbench.runs import Run


class JaxInference:
    def __init__(self, run: Run, variant: Variant) -> None:
        self.on_gpu = run.device_kind == "gpu"
        self.device = jax.devices()[0]
        dtype = {"bf16": jnp.bfloat16, "fp16": jnp.float16}.get(variant.precision, jnp.float32)
        model = build_model(run.model, run.num_classes, dtype)
        shape = (1, *run.image_size, run.channels)
        variables = jax.jit(lambda key: model.init(key, jnp.zeros(shape), train=False))(jax.random.key(run.seed))
        self.variables = jax.device_put(variables, self.device)
        self.forward = jax.jit(lambda v, x: model.apply(v, x, train=False))
        # Page-locked host memory that the device copies from directly (GPU only); the copy then
        # has to name the device memory explicitly.
        self.host_sharding = (jax.sharding.SingleDeviceSharding(self.device, memory_kind="pinned_host")
                              if variant.pinned else None)
        self.device_target = (jax.sharding.SingleDeviceSharding(self.device, memory_kind="device")
                              if variant.pinned else self.device)
        self._last = None

    def host_batch(self, images: np.ndarray):
        nhwc = np.ascontiguousarray(images.transpose(0, 2, 3, 1))
        return jax.device_put(nhwc, self.host_sharding) if self.host_sharding is not None else nhwc

    def infer(self, host_batch):
        self._last = self.forward(self.variables, jax.device_put(host_batch, self.device_target))
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
