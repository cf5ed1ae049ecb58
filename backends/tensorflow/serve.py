"""The TensorFlow engine behind `cnnbench serve`: uint8 NHWC staging buffers, normalisation, forward,
softmax and top-k in one ``tf.function`` (XLA where the spec compiles), as a TensorFlow user serves.

A launch converts the staging rows to a tensor and calls the function; TensorFlow runs a function call
to completion before returning on CPU and enqueues its kernels on a GPU, and ``collect`` reads the
small results back (``.numpy()`` waits for them). TensorFlow takes numpy staging buffers: it has no
way to page-lock a host array in place, and copies host inputs to a GPU through its own staging. A
buffer is reused by the batcher only after its batch's results are back, so the tensor made from it
(which may share its memory on CPU) is never overwritten while in use.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from backends.tensorflow.infer import TFInference
from cnnbench.data.normalize import channel_scale_shift
from cnnbench.infer.batcher import padded_size
from cnnbench.runs import Run, Variant


class TFServeEngine:
    def __init__(self, run: Run, variant: Variant, top_k: int, pad_multiple: int) -> None:
        self.base = TFInference(run, variant)  # the model, device and precision policy of `infer`
        tf = self.tf = self.base.tf
        self.image_shape = (*run.image_size, run.channels)
        self.top_k, self.pad_multiple = min(top_k, run.num_classes), max(pad_multiple, 1)
        scale, shift = (tf.constant(a) for a in channel_scale_shift(run.channels))  # broadcast over NHWC
        model, k = self.base.model, self.top_k

        def top_k(images):
            logits = model(tf.cast(images, tf.float32) * scale + shift, training=False)
            scores, ids = tf.math.top_k(tf.nn.softmax(tf.cast(logits, tf.float32), axis=-1), k)
            return ids, scores

        self._top_k = tf.function(top_k, jit_compile=variant.compile)  # placed by the device of each call
        self._host: list[np.ndarray] = []

    def staging_buffers(self, count: int, max_batch: int) -> list[np.ndarray]:
        self._host = [np.zeros((max_batch, *self.image_shape), np.uint8) for _ in range(count)]
        return self._host

    def _call(self, images: np.ndarray) -> tuple[Any, Any]:
        with self.tf.device(self.base.device):
            return self._top_k(self.tf.constant(images))

    def launch(self, index: int, valid: int) -> Any:
        host = self._host[index]
        ids, scores = self._call(host[: padded_size(valid, self.pad_multiple, len(host))])
        return ids, scores, valid

    def collect(self, handle: Any) -> tuple[np.ndarray, np.ndarray]:
        ids, scores, valid = handle
        return ids.numpy()[:valid], scores.numpy()[:valid]

    def infer_now(self, images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One plain forward per call, waited for, as a route that calls the model per request would."""
        ids, scores = self._call(np.ascontiguousarray(images))
        return ids.numpy(), scores.numpy()

    def device_name(self) -> str:
        return self.base.device_name()
