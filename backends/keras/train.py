"""Keras 3 training: the Keras model of :mod:`backends.keras.models` trained by ``model.fit`` on the engine
that the strategy names.

Strategies, each run in its own process with ``KERAS_BACKEND`` set before Keras is imported:
- ``keras-jax``: data parallel through ``keras.distribution.DataParallel`` (batch sharded over a
  1-D device mesh, variables replicated). The jitted step is one SPMD program over the *global*
  batch, so batch-norm statistics are those of the global batch: on several devices such runs
  need ``sync_bn = true`` when the model has batch norm (the row then says what was computed).
  ``fit`` always jits on JAX, as the native JAX backend does (un-jitted JAX is a debugging mode).
- ``keras-tensorflow``: ``fit`` under a ``tf.distribute.MirroredStrategy`` scope (local BN unless
  ``sync_bn``); ``jit_compile`` (XLA) follows the spec's ``compile``.
- ``keras-torch``: one device; ``jit_compile`` (torch.compile of the train step) follows ``compile``.
  The installed Keras has no distribution support for the PyTorch engine, so N > 1 is refused.

Timing: the shared protocol is driven from a ``fit`` callback (:mod:`backends.keras.common`), exactly as the
TensorFlow backend's ``fit`` strategy; ``sync`` waits for the engine's queued work.
"""

from __future__ import annotations

import contextlib
import resource

import numpy as np

from cnnbench import envinfo
from cnnbench.backend import BuildContext
from cnnbench.runs import Run


class _Engine:
    """What differs between engines: placement, device sync, memory and device facts."""

    def __init__(self, run: Run) -> None:
        self.run, self.name = run, run.strategy.removeprefix("keras-")

    def distribute(self):
        """Set up data parallelism; returns the scope in which the model and optimizer are made."""
        import keras

        run = self.run
        if self.name == "jax":
            import jax

            devices = jax.devices()[: run.devices]
            if len(devices) != run.devices:
                raise RuntimeError(f"{run.devices} devices requested, JAX sees {len(jax.devices())}")
            if run.devices > 1:
                keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices))
            return contextlib.nullcontext()
        if self.name == "tensorflow":
            import tensorflow as tf

            from backends.tensorflow.common import configure_devices

            self.tf = tf
            plan = configure_devices(tf, run)
            return tf.distribute.MirroredStrategy(list(plan.devices)).scope()
        import torch

        if run.device_kind == "gpu" and not torch.cuda.is_available():
            raise RuntimeError("a GPU run, but PyTorch sees no CUDA device")
        return contextlib.nullcontext()

    def sync(self, model) -> None:
        if self.name == "jax":
            import jax

            # During fit the newest state lives in model._jax_state (Keras keeps it there so that
            # callbacks can reach it); its arrays exist once the step that made them has finished.
            state = getattr(model, "_jax_state", None) or [v.value for v in model.variables]
            jax.block_until_ready(state)
        elif self.name == "tensorflow":
            self.tf.test.experimental.sync_devices()
        elif self.run.device_kind == "gpu":
            import torch

            torch.cuda.synchronize()  # on CPU, eager PyTorch has already finished every op

    def peak_memory_bytes(self) -> int | None:
        if self.run.device_kind != "gpu":
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        if self.name == "jax":
            import jax

            return jax.devices()[0].memory_stats().get("peak_bytes_in_use")
        if self.name == "tensorflow":
            return int(self.tf.config.experimental.get_memory_info("GPU:0")["peak"])
        import torch

        return int(torch.cuda.max_memory_allocated())

    def device_name(self) -> str:
        if self.run.device_kind != "gpu":
            return envinfo.cpu_name()
        if self.name == "jax":
            import jax

            return jax.devices()[0].device_kind
        if self.name == "tensorflow":
            gpu = self.tf.config.list_physical_devices("GPU")[0]
            return self.tf.config.experimental.get_device_details(gpu).get("device_name", "GPU")
        import torch

        return torch.cuda.get_device_name(0)


class KerasTrainer:
    owns_loop = True  # model.fit runs the loop; the runner calls run_loop

    def __init__(self, run: Run, ctx: BuildContext) -> None:
        import keras

        from backends.keras.common import FitBatches
        from backends.keras.models import build_model
        from backends.keras.optim import TableSchedule, TorchSGD

        self.keras, self.run, self.ctx = keras, run, ctx
        self.engine = _Engine(run)
        scope = self.engine.distribute()
        keras.utils.set_random_seed(run.seed)
        policy = {"bf16": "mixed_bfloat16", "fp16": "mixed_float16"}.get(run.precision, "float32")
        keras.mixed_precision.set_dtype_policy(policy)
        # Under JAX, fit always jits; elsewhere jit_compile is the spec's compile switch.
        jit_compile = True if self.engine.name == "jax" else run.compile
        with scope:
            self.model = build_model(run.model, run.image_size, run.channels, run.num_classes,
                                     sync_bn=run.sync_bn)
            optimizer = TorchSGD(TableSchedule(ctx.lr_table), momentum=run.momentum,
                                 weight_decay_l2=run.weight_decay, nesterov=run.nesterov)
            if run.precision == "fp16":
                optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
            self.model.compile(optimizer=optimizer, jit_compile=jit_compile,
                               loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        self.batches = FitBatches(run, ctx.dataset)
        self.steps_per_epoch = run.steps_per_epoch
        self._callback = None
        self._next_batch = 0

    def run_loop(self, protocol) -> None:
        from backends.keras.common import ProtocolCallback

        self._callback = ProtocolCallback(protocol, len(self.batches))
        self.model.fit(self.batches, epochs=self.run.epochs or 1, callbacks=[self._callback], verbose=0)

    def step(self) -> None:
        """One step outside fit (the parity probe): ``train_on_batch`` on the next batch."""
        x, y = self.batches[self._next_batch % len(self.batches)]
        self._next_batch += 1
        self.model.train_on_batch(x, y)

    def sync(self) -> None:
        self.engine.sync(self.model)

    def train_loss(self) -> float:
        return self._callback.last_loss if self._callback else float("nan")

    def _logits(self, images_nhwc: np.ndarray, batch: int) -> np.ndarray:
        # Under DataParallel every batch must split over the devices: pad, then drop the padding.
        devices = self.run.devices
        pad, batch = -len(images_nhwc) % devices, batch + -batch % devices
        if pad:
            images_nhwc = np.concatenate([images_nhwc, np.repeat(images_nhwc[-1:], pad, axis=0)])
        logits = self.model.predict(images_nhwc, batch_size=batch, verbose=0)
        return np.asarray(logits, dtype=np.float32)[: len(images_nhwc) - pad]

    def evaluate(self) -> tuple[float, float]:
        from backends.keras.common import nhwc

        data = self.ctx.dataset
        logits = self._logits(nhwc(data.test_x), 2 * self.run.global_batch)
        shifted = logits - logits.max(axis=1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        loss = float(-log_probs[np.arange(len(logits)), data.test_y].mean())
        return loss, float((logits.argmax(axis=1) == data.test_y).mean())

    def predict(self, images: np.ndarray) -> np.ndarray:
        from backends.keras.common import nhwc

        return self._logits(nhwc(images), max(len(images), 1))

    def param_count(self) -> int:
        return int(sum(np.prod(v.shape) for v in self.model.trainable_variables))

    def get_weights(self) -> dict[str, np.ndarray]:
        from backends.keras.models import get_neutral_weights

        return get_neutral_weights(self.model, self.run.num_classes)

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        from backends.keras.models import set_neutral_weights

        set_neutral_weights(self.model, weights, self.run.num_classes)

    def profiler(self, directory):
        from backends import profilers

        return profilers.for_engine(self.engine.name, directory, self.run.device_kind == "gpu")

    def peak_memory_bytes(self) -> int | None:
        return self.engine.peak_memory_bytes()

    def device_name(self) -> str:
        return self.engine.device_name()
