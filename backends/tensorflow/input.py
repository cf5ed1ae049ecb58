"""TensorFlow's input pipeline for uint8 sources (image folders, video, CIFAR-10): ``tf.data``.

Items of the neutral epoch order (:meth:`cnnbench.data.loader.InputPlan.epoch_order`, epoch after epoch)
-> a parallel ``map`` (``num_parallel_calls`` = ``[data] workers``, or AUTOTUNE for 0; ``deterministic``
so that the order stays the neutral one) that decodes each item -> ``batch(global_batch)`` ->
``prefetch``. Under MirroredStrategy the trainer distributes it with ``experimental_distribute_dataset``,
whose iterator prefetches each replica's slice onto its device (``experimental_fetch_to_device``); the
uint8 batch is prepared on the device by :func:`backends.tensorflow.transforms.prepare` inside the step.

Decoding runs the same decoder as the other frameworks (:mod:`cnnbench.data.decode`, through
``tf.numpy_function``; it releases the GIL) rather than ``tf.io.decode_jpeg``, so all three see
identical pixels and the same corrupt-image policy.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np
import tensorflow as tf

from cnnbench.data.loader import InputPlan, SampleReader, collate
from cnnbench.errors import DataError


class TFInput:
    def __init__(self, plan: InputPlan, global_batch: int) -> None:
        if plan.decode_device != "cpu":
            raise DataError("[data] decode_device = \"gpu\" is a PyTorch option (torchvision's nvJPEG); "
                            "TensorFlow decodes on the CPU here")
        self.plan, self.global_batch = plan, global_batch
        self.reader = SampleReader(plan)
        self.steps_per_epoch = plan.steps_per_epoch(global_batch)
        if not self.steps_per_epoch:
            raise DataError(f"{plan.index.root}: fewer items than one global batch of {global_batch}")

    def _keys(self) -> Iterator[tuple[int, int]]:
        for epoch in itertools.count():
            for item in self.plan.epoch_order(epoch)[:self.steps_per_epoch * self.global_batch]:
                yield epoch, int(item)

    def _read(self, epoch, item, train):
        sample = self.reader.sample(int(epoch), int(item), bool(train))
        return sample.pixels, np.int64(sample.label), sample.box, np.bool_(sample.flip)

    def _map(self, train: bool):
        canvas = (*self.plan.canvas_hw, 3)

        def read(epoch, item):
            pixels, label, box, flip = tf.numpy_function(
                lambda e, i: self._read(e, i, train), [epoch, item], [tf.uint8, tf.int64, tf.float32, tf.bool],
                stateful=False)
            pixels.set_shape(canvas)
            box.set_shape((4,))
            label.set_shape(())
            flip.set_shape(())
            return (pixels, box, flip), label

        return read

    def dataset(self) -> tf.data.Dataset:
        """((uint8 images, boxes, flips), labels) global batches, endlessly."""
        keys = tf.data.Dataset.from_generator(self._keys, output_signature=(
            tf.TensorSpec((), tf.int64), tf.TensorSpec((), tf.int64)))
        workers = self.plan.workers or tf.data.AUTOTUNE
        options = tf.data.Options()
        options.autotune.enabled = True
        return (keys.map(self._map(True), num_parallel_calls=workers, deterministic=True)
                .batch(self.global_batch, drop_remainder=True).prefetch(self.plan.prefetch).with_options(options))

    def eval_batches(self, batch: int) -> Iterator[tuple[tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray]]:
        items = self.plan.test_items
        for lo in range(0, len(items), batch):
            images, labels, boxes, flips = collate([self.reader.sample(0, int(i), False) for i in items[lo:lo + batch]])
            yield (images, boxes, flips), labels
