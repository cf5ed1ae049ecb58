"""What every ``model.fit`` path shares: the batches it reads and the callback that times it.

Keras owns the training loop in ``fit``; the shared timing protocol is driven from a callback
that uses *begin* hooks only. A batch-*end* hook would make Keras read the step's logs (a host
sync) after every step, which plain ``fit`` does not do, so the protocol's ``after_step(i)`` is
called at the beginning of step ``i + 1`` (and at the end of each epoch).
"""

from __future__ import annotations

import keras
import numpy as np

from cnnbench.data.arrays import Dataset
from cnnbench.runs import Run


def nhwc(images: np.ndarray) -> np.ndarray:
    """Keras models take channels-last images; converted once, at load time."""
    return np.ascontiguousarray(images.transpose(0, 2, 3, 1))


class FitBatches(keras.utils.PyDataset):
    """Global batches for ``fit`` on any Keras engine: reshuffled every epoch, the last partial
    batch dropped (as in every backend); synthetic data repeats one global batch."""

    def __init__(self, run: Run, dataset: Dataset) -> None:
        super().__init__()  # one worker, no multiprocessing: fit reads the arrays in-process
        self.batch, self.synthetic = run.global_batch, run.dataset == "synthetic"
        self.x, self.y = nhwc(dataset.train_x), dataset.train_y
        self.steps = run.steps_per_epoch or run.total_steps
        self.rng = np.random.default_rng(run.seed)
        self.order = self.rng.permutation(len(self.x))

    def __len__(self) -> int:
        return self.steps

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        if self.synthetic:
            return self.x[: self.batch], self.y[: self.batch]
        picked = self.order[index * self.batch:(index + 1) * self.batch]
        return self.x[picked], self.y[picked]

    def on_epoch_end(self) -> None:
        self.order = self.rng.permutation(len(self.x))


class ProtocolCallback(keras.callbacks.Callback):
    """Calls the shared protocol's hooks around every step of ``fit``; keeps the epoch's loss."""

    def __init__(self, protocol, steps_per_epoch: int) -> None:
        super().__init__()
        self.protocol, self.steps = protocol, steps_per_epoch
        self.epoch, self.last_loss = 0, float("nan")

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        step = self.epoch * self.steps + batch
        if batch > 0:
            self.protocol.after_step(step - 1)
        self.protocol.before_step(step)

    def on_epoch_end(self, epoch, logs=None):
        self.last_loss = float(logs["loss"])
        self.protocol.after_step((epoch + 1) * self.steps - 1)
