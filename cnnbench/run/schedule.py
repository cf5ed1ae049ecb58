"""The learning-rate schedule as a table of per-step values, shared by every backend.

Backends index this table with their step counter (a Python float in PyTorch, a device-resident
array inside the compiled step in JAX and TensorFlow), so all three follow the same schedule by
construction rather than by three implementations that must agree.
"""

from __future__ import annotations

import math

import numpy as np


def lr_table(peak_lr: float, total_steps: int, schedule: str, warmup_steps: int) -> np.ndarray:
    """Learning rate for each step 0..total_steps-1 (float32)."""
    steps = np.arange(total_steps, dtype=np.float64)
    lr = np.full(total_steps, peak_lr, dtype=np.float64)
    if schedule == "cosine":
        decay = max(total_steps - warmup_steps, 1)
        progress = np.clip((steps - warmup_steps) / decay, 0.0, 1.0)
        lr = peak_lr * 0.5 * (1.0 + np.cos(math.pi * progress))
    if warmup_steps:
        lr = np.where(steps < warmup_steps, peak_lr * (steps + 1) / warmup_steps, lr)
    return lr.astype(np.float32)


def lr_table_for(run) -> np.ndarray:
    """The table of a :class:`~cnnbench.runs.Run` (warm-up given in epochs, real data only)."""
    warmup = int(round(run.warmup_epochs * run.steps_per_epoch))
    return lr_table(run.lr, max(run.total_steps, 1), run.schedule, warmup)
