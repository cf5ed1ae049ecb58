"""TensorFlow/Keras training: tf.distribute.MirroredStrategy (MultiWorkerMirroredStrategy across hosts).

Strategies:
- ``mirrored``: a custom step, ``strategy.run`` inside ``tf.function`` (XLA ``jit_compile`` from the
  spec's compile switch), loss summed per replica and divided by the global batch, gradients
  all-reduced by the Keras optimizer.
- ``fit``: the same model and optimizer trained by ``model.fit`` under ``strategy.scope()``; the
  shared protocol is driven from a callback, so users see what the convenient path costs.

Devices are configured by :mod:`backends.tensorflow.common` before any TensorFlow op.
"""

from __future__ import annotations

import resource

import numpy as np

from backends.tensorflow.common import configure_devices
from cnnbench import envinfo
from cnnbench.backend import BuildContext
from cnnbench.runs import Run


class TFTrainer:
    def __init__(self, run: Run, ctx: BuildContext) -> None:
        import keras
        import tensorflow as tf

        from backends.keras.optim import TableSchedule, TorchSGD
        from backends.tensorflow.models import build_model

        self.tf, self.keras, self.run, self.ctx = tf, keras, run, ctx
        plan = configure_devices(tf, run)
        keras.utils.set_random_seed(run.seed)
        policy = {"bf16": "mixed_bfloat16", "fp16": "mixed_float16"}.get(run.precision, "float32")
        keras.mixed_precision.set_dtype_policy(policy)
        if run.hosts > 1:
            self.strategy = tf.distribute.MultiWorkerMirroredStrategy()
        else:
            self.strategy = tf.distribute.MirroredStrategy(list(plan.devices))
        with self.strategy.scope():
            self.model = build_model(run.model, run.image_size, run.channels, run.num_classes,
                                     sync_bn=run.sync_bn)
            optimizer = TorchSGD(TableSchedule(ctx.lr_table), momentum=run.momentum,
                                 weight_decay_l2=run.weight_decay, nesterov=run.nesterov)
            if run.precision == "fp16":
                optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
            self.optimizer = optimizer
            self.optimizer.build(self.model.trainable_variables)
        self.steps_per_epoch = run.steps_per_epoch
        self.owns_loop = run.strategy == "fit"  # the runner then calls run_loop instead of step
        self._losses: list = []
        self._last = None
        self.input = None
        if ctx.inputs is not None:  # uint8 frames (files, video, CIFAR-10) through tf.data, prepared on device
            from backends.tensorflow.input import TFInput

            self.input = TFInput(ctx.inputs, run.global_batch)
            self._dataset = self.input.dataset()
            self.next_batch = self._next_distributed  # the runner fetches batches apart from the step
        else:
            self._dataset = self._make_dataset()
        if run.strategy == "mirrored":
            self._iterator = iter(self.strategy.experimental_distribute_dataset(self._dataset))
            self._train_step = self._make_train_step()
        self._eval_step = tf.function(self._eval_batch)

    # -- input ---------------------------------------------------------------------------------
    def _make_dataset(self):
        tf, run, data = self.tf, self.run, self.ctx.dataset
        if run.dataset == "synthetic":
            # One global batch, repeated: the pipeline only hands over the same tensors.
            x = np.ascontiguousarray(data.train_x[: run.global_batch].transpose(0, 2, 3, 1))
            y = data.train_y[: run.global_batch]
            return tf.data.Dataset.from_tensors((x, y)).repeat().prefetch(tf.data.AUTOTUNE)
        x = np.ascontiguousarray(data.train_x.transpose(0, 2, 3, 1))  # NHWC, once at load time
        dataset = tf.data.Dataset.from_tensor_slices((x, data.train_y))
        dataset = dataset.shuffle(len(x), seed=run.seed, reshuffle_each_iteration=True)
        return dataset.batch(run.global_batch, drop_remainder=True).repeat().prefetch(tf.data.AUTOTUNE)

    # -- the training step ---------------------------------------------------------------------
    def _make_train_step(self):
        tf, keras, run = self.tf, self.keras, self.run
        model, optimizer, global_batch = self.model, self.optimizer, run.global_batch

        def replica_step(x, y):
            x = prepare(x)  # a uint8 batch (images, boxes, flips) is prepared on the device first
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                per_example = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
                loss = tf.reduce_sum(per_example) / global_batch  # summed over replicas = global mean
                scaled = optimizer.scale_loss(loss) if run.precision == "fp16" else loss
            grads = tape.gradient(scaled, model.trainable_variables)
            optimizer.apply(grads, model.trainable_variables)  # all-reduces (SUM) across replicas
            return loss

        prepare = self._prepare
        replica_step = tf.function(replica_step, jit_compile=run.compile)

        def run_replicas(x, y):
            per_replica = self.strategy.run(replica_step, args=(x, y))
            return self.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

        if self.input is not None:  # the runner fetched the distributed batch (timing its wait)
            return tf.function(run_replicas)

        @tf.function
        def train_step(iterator):
            x, y = next(iterator)
            return run_replicas(x, y)

        return train_step

    def _prepare(self, x):
        if not isinstance(x, tuple):
            return x
        from backends.tensorflow.transforms import prepare

        plan = self.ctx.inputs
        return prepare(*x, out_hw=plan.out_hw, mean=plan.mean, std=plan.std, dtype="float32")

    def _next_distributed(self):
        """The next global batch, each replica's slice already on its device."""
        return next(self._iterator)

    def step(self, batch=None) -> None:
        self._last = self._train_step(self._iterator) if batch is None else self._train_step(*batch)
        self._losses.append(self._last)  # a device tensor: reading it would sync

    def run_loop(self, protocol) -> None:
        """``fit``: Keras owns the loop; a callback calls the shared protocol's hooks."""
        from backends.keras.common import ProtocolCallback

        run = self.run
        steps = run.steps_per_epoch or run.total_steps
        self._fit_callback = ProtocolCallback(protocol, steps)
        with self.strategy.scope():
            self.model.compile(optimizer=self.optimizer, jit_compile=run.compile,
                               loss=self.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        self.model.fit(self._dataset, epochs=run.epochs or 1, steps_per_epoch=steps,
                       callbacks=[self._fit_callback], verbose=0)

    def close(self) -> None:
        """Stop tf.data's reader threads before the interpreter exits (an endless generator still being
        read at exit aborts the process: "terminate called without an active exception")."""
        if self.input is not None:
            import gc

            self._iterator = self._dataset = None
            gc.collect()

    def sync(self) -> None:
        if self.run.hosts > 1:
            # sync_devices cannot reach remote workers; the step counter is assigned after every
            # variable update of a step, so reading it waits for the whole step on this worker.
            self.optimizer.iterations.numpy()
            return
        # Waits for every local device's queued work; reading a loss would only wait for that tensor.
        self.tf.test.experimental.sync_devices()

    # -- evaluation and inspection -------------------------------------------------------------
    def train_loss(self) -> float:
        if self.run.strategy == "fit":
            return self._fit_callback.last_loss
        losses = [float(v) for v in self._losses]
        self._losses = []
        return float(np.mean(losses)) if losses else float("nan")

    def _eval_batch(self, x, y):
        logits = self.tf.cast(self.model(x, training=False), self.tf.float32)
        loss = self.keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
        correct = self.tf.cast(self.tf.equal(self.tf.argmax(logits, 1), y), self.tf.float32)
        return self.tf.reduce_sum(loss), self.tf.reduce_sum(correct)

    def evaluate(self) -> tuple[float, float]:
        data, batch = self.ctx.dataset, 2 * self.run.global_batch
        if self.input is not None and self.run.dataset != "cifar10":  # files: through the loader
            batches = ((self._prepare(tuple(self.tf.constant(a) for a in x)), y)
                       for x, y in self.input.eval_batches(batch))
        else:
            x = np.ascontiguousarray(data.test_x.transpose(0, 2, 3, 1))
            batches = ((x[lo:lo + batch], data.test_y[lo:lo + batch]) for lo in range(0, len(x), batch))
        loss_sum, correct, count = 0.0, 0.0, 0
        for images, labels in batches:
            loss, right = self._eval_step(images, labels)
            loss_sum, correct, count = loss_sum + float(loss), correct + float(right), count + len(labels)
        return loss_sum / max(count, 1), correct / max(count, 1)

    def predict(self, images: np.ndarray) -> np.ndarray:
        logits = self.model(np.ascontiguousarray(images.transpose(0, 2, 3, 1)), training=False)
        return np.asarray(logits, dtype=np.float32)

    def param_count(self) -> int:
        return int(sum(np.prod(v.shape) for v in self.model.trainable_variables))

    def get_weights(self) -> dict[str, np.ndarray]:
        from backends.tensorflow.models import get_neutral_weights

        return get_neutral_weights(self.model, self.run.num_classes)

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        from backends.tensorflow.models import set_neutral_weights

        set_neutral_weights(self.model, weights, self.run.num_classes)

    def profiler(self, directory):
        from backends import profilers

        return profilers.tf_trace(directory)

    def peak_memory_bytes(self) -> int | None:
        if self.run.device_kind == "gpu":
            return int(self.tf.config.experimental.get_memory_info("GPU:0")["peak"])
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def device_name(self) -> str:
        if self.run.device_kind == "gpu":
            details = self.tf.config.experimental.get_device_details(
                self.tf.config.list_physical_devices("GPU")[0])
            return details.get("device_name", "GPU")
        return envinfo.cpu_name()
