"""TensorFlow/Keras inference model for `cnnbench infer`: a tf.function forward pass on one device."""

from __future__ import annotations

import contextlib
import resource
from pathlib import Path

import numpy as np

from backends import profilers
from cnnbench import envinfo
from cnnbench.runs import Run, Variant


class TFInference:
    def __init__(self, run: Run, variant: Variant) -> None:
        import keras
        import tensorflow as tf

        from backends.tensorflow.common import configure_devices
        from backends.tensorflow.models import build_model

        self.tf, self.run = tf, run
        plan = configure_devices(tf, run)
        self.device = plan.devices[0]
        keras.utils.set_random_seed(run.seed)
        policy = {"bf16": "mixed_bfloat16", "fp16": "mixed_float16"}.get(variant.precision, "float32")
        keras.mixed_precision.set_dtype_policy(policy)
        with tf.device(self.device):
            self.model = build_model(run.model, run.image_size, run.channels, run.num_classes)
        # Graph mode always (what a TF user serves with); `compile` adds XLA.
        self.forward = tf.function(lambda x: self.model(x, training=False), jit_compile=variant.compile)
        self.input = variant.input
        self._last = None

    def host_batch(self, images: np.ndarray, input: str | None = None):
        """float32 NHWC: a numpy array (pageable), or a tensor on the device (``resident``)."""
        nhwc = np.ascontiguousarray(images.transpose(0, 2, 3, 1))
        if (input or self.input) == "resident":
            with self.tf.device(self.device):
                return self.tf.identity(self.tf.constant(nhwc))
        return nhwc

    def infer(self, host_batch):
        with self.tf.device(self.device):
            x = host_batch if isinstance(host_batch, self.tf.Tensor) else self.tf.constant(host_batch)
            self._last = self.forward(x)
        return self._last

    def fetch(self, output) -> np.ndarray:
        return np.asarray(output, dtype=np.float32)

    def sync(self) -> None:
        self.tf.test.experimental.sync_devices()

    def profiler(self, directory: Path) -> contextlib.AbstractContextManager:
        return profilers.tf_trace(directory)

    def device_name(self) -> str:
        if self.run.device_kind == "gpu":
            gpu = self.tf.config.list_physical_devices("GPU")[0]
            return self.tf.config.experimental.get_device_details(gpu).get("device_name", "GPU")
        return envinfo.cpu_name()

    def peak_memory_bytes(self) -> int | None:
        if self.run.device_kind == "gpu":
            return int(self.tf.config.experimental.get_memory_info("GPU:0")["peak"])
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
