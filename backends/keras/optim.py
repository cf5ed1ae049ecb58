"""SGD for Keras with PyTorch's update rule, so that every backend takes the same step.

PyTorch: g <- g + wd * p;  buf <- momentum * buf + g;  p <- p - lr * buf  (nesterov: g + m * buf).
Keras' SGD keeps lr inside the momentum buffer and decays weights decoupled from the gradient;
both differ once the learning rate changes or weight decay is on, hence this subclass.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops


class TableSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """The learning rate of step i is table[i] (cnnbench.run.schedule's shared table)."""

    def __init__(self, table: np.ndarray) -> None:
        self.table = np.asarray(table, dtype=np.float32)

    def __call__(self, step):
        index = ops.minimum(ops.cast(step, "int32"), len(self.table) - 1)
        return ops.take(ops.convert_to_tensor(self.table), index)

    def get_config(self) -> dict:
        return {"table": self.table.tolist()}


class TorchSGD(keras.optimizers.SGD):
    def __init__(self, learning_rate, momentum: float = 0.0, weight_decay_l2: float = 0.0,
                 nesterov: bool = False, **kwargs) -> None:
        super().__init__(learning_rate=learning_rate, momentum=momentum, nesterov=nesterov, **kwargs)
        self.weight_decay_l2 = weight_decay_l2

    def update_step(self, gradient, variable, learning_rate):
        lr = ops.cast(learning_rate, variable.dtype)
        grad = ops.cast(gradient, variable.dtype)
        if self.weight_decay_l2:
            grad = ops.add(grad, ops.multiply(variable, ops.cast(self.weight_decay_l2, variable.dtype)))
        if self.momentum:
            buf = self.momentums[self._get_variable_index(variable)]
            momentum = ops.cast(self.momentum, variable.dtype)
            self.assign(buf, ops.add(ops.multiply(buf, momentum), grad))
            grad = ops.add(grad, ops.multiply(buf, momentum)) if self.nesterov else buf
        self.assign_sub(variable, ops.multiply(grad, lr))

    def get_config(self) -> dict:
        return {**super().get_config(), "weight_decay_l2": self.weight_decay_l2}
