"""The contract between the shared runner and a backend: what ``build`` returns and receives."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from cnnbench.data.arrays import Dataset
from cnnbench.data.loader import InputPlan


@dataclass(frozen=True)
class BuildContext:
    """What the worker hands a backend's ``build`` besides the run."""

    dataset: Dataset  # full arrays (NCHW float32); each process takes its own shard
    lr_table: np.ndarray  # learning rate for every step
    process_index: int  # this process among all processes of the run
    process_count: int
    local_rank: int  # this process among those of its host
    # uint8 sources (image folders, video, CIFAR-10 training images): what the input pipeline reads
    inputs: InputPlan | None = None


class Trainer(Protocol):
    """A model, its optimizer, its input pipeline and one compiled/traced training step."""

    steps_per_epoch: int  # 0 when there are no epochs (synthetic data)
    # A trainer whose framework owns the loop (Keras fit) sets owns_loop and implements
    # run_loop(protocol), calling protocol.before_step/after_step around every step.
    owns_loop: bool = False

    def step(self, batch=None) -> None:
        """One global training step on ``batch`` (default: the next one); asynchronous where the
        framework is."""

    # Optional: ``next_batch()`` returns the next batch ready for ``step(batch)``; the runner then
    # times how long each step waited for its input (data_wait_* columns).

    def sync(self) -> None:
        """Block until every device (and, across processes, every rank) has finished its work."""

    def train_loss(self) -> float:
        """Mean training loss over the steps since the last call (all devices)."""

    def evaluate(self) -> tuple[float, float]:
        """(loss, accuracy) on the whole test split, BN in inference mode."""

    def predict(self, images: np.ndarray) -> np.ndarray:
        """Logits for NCHW float32 images, inference mode, float32."""

    def param_count(self) -> int: ...

    def get_weights(self) -> dict[str, np.ndarray]:
        """Framework-neutral weights: PyTorch state-dict names and layouts, in layer order."""

    def set_weights(self, weights: dict[str, np.ndarray]) -> None: ...

    def peak_memory_bytes(self) -> int | None: ...

    def device_name(self) -> str: ...

    # Optional: ``close()`` releases process-group resources at the end of a run.
