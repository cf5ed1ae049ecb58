"""The JAX engine behind `cnnbench serve`: uint8 NHWC staging buffers, ``device_put`` of the next
batch while the current one computes (asynchronous dispatch), normalisation and top-k inside the
jitted function.

A launch dispatches ``device_put`` of the staging rows and the jitted normalise + forward + softmax +
top-k, and starts the copy of the (small) result back to the host; all return at once, so the next
batch's transfer is issued while this one computes. JAX takes numpy staging buffers: XLA's transfer
manager copies them into its own page-locked bounce buffers (a host array cannot be made pinned in
place from numpy), and a buffer is reused only after its batch's results are back.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from backends.jax.infer import JaxInference
from cnnbench.data.normalize import channel_scale_shift
from cnnbench.infer.batcher import padded_size
from cnnbench.runs import Run, Variant


class JaxServeEngine:
    def __init__(self, run: Run, variant: Variant, top_k: int, pad_multiple: int) -> None:
        self.base = JaxInference(run, variant)  # the variables and jitted forward of `infer`
        self.device = self.base.device
        self.image_shape = (*run.image_size, run.channels)
        self.top_k, self.pad_multiple = min(top_k, run.num_classes), max(pad_multiple, 1)
        scale, shift = channel_scale_shift(run.channels)  # broadcast over NHWC
        forward, k = self.base.forward, self.top_k

        def top_k(variables, images):
            logits = forward(variables, images.astype(jnp.float32) * scale + shift)
            scores, ids = jax.lax.top_k(jax.nn.softmax(logits.astype(jnp.float32), axis=-1), k)
            return ids, scores

        self._top_k = jax.jit(top_k)
        self._host: list[np.ndarray] = []

    def staging_buffers(self, count: int, max_batch: int) -> list[np.ndarray]:
        self._host = [np.zeros((max_batch, *self.image_shape), np.uint8) for _ in range(count)]
        return self._host

    def launch(self, index: int, valid: int) -> Any:
        host = self._host[index]
        rows = host[: padded_size(valid, self.pad_multiple, len(host))]
        ids, scores = self._top_k(self.base.variables, jax.device_put(rows, self.device))
        ids.copy_to_host_async()
        scores.copy_to_host_async()
        return ids, scores, valid

    def collect(self, handle: Any) -> tuple[np.ndarray, np.ndarray]:
        ids, scores, valid = handle
        return np.asarray(ids)[:valid], np.asarray(scores)[:valid]

    def infer_now(self, images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One plain forward per call, waited for, as a route that calls the model per request would."""
        ids, scores = self._top_k(self.base.variables, jax.device_put(np.ascontiguousarray(images), self.device))
        return np.asarray(ids), np.asarray(scores)

    def device_name(self) -> str:
        return self.base.device_name()
