"""JAX's input pipeline for uint8 sources (image folders, video, CIFAR-10): grain, as JAX users load data.

Per epoch, a ``grain.MapDataset`` over this process's share of the neutral epoch order
(:meth:`cnnbench.data.loader.InputPlan.step_items`) maps each item to its sample (decode, pad into the
canvas, crop draw) and batches them; ``to_iter_dataset`` reads ahead with a thread pool
(``ReadOptions``: the decoders release the GIL) and, with ``[data] workers > 0``, ``mp_prefetch`` runs
the map in that many worker processes. The trainer ``device_put``s the next batch while the current step
runs (one batch in flight) and the jitted step prepares the uint8 batch on the device
(:func:`backends.jax.transforms.prepare`) before the model, in one XLA program.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np

from cnnbench.data.loader import InputPlan, SampleReader, collate
from cnnbench.errors import DataError

HostBatch = tuple[tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray]  # ((images, boxes, flips), labels)


def _grain():
    try:
        import grain
    except ImportError:
        raise DataError("the JAX input pipeline needs grain (pip install grain); not installed here") from None
    from absl import flags

    # grain reads absl flags (in its worker processes too); outside absl.app nothing parses them.
    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
    return grain


class _EpochKeys:
    """Random access over (epoch, item) for ``epochs`` epochs of this process's share of the neutral
    order: one grain dataset for the whole run, so its worker processes start once."""

    def __init__(self, plan: InputPlan, global_batch: int, lo: int, local: int, epochs: int) -> None:
        self.plan, self.global_batch, self.lo, self.local = plan, global_batch, lo, local
        self.steps = plan.steps_per_epoch(global_batch)
        self.per_epoch, self.epochs = self.steps * local, epochs
        self._orders: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return self.per_epoch * self.epochs

    def __getitem__(self, key: int) -> tuple[int, int]:
        epoch, offset = divmod(int(key), self.per_epoch)
        if epoch not in self._orders:
            order = self.plan.epoch_order(epoch)[:self.steps * self.global_batch]
            self._orders = {epoch: order.reshape(self.steps, self.global_batch)[:, self.lo:self.lo + self.local]
                            .reshape(-1)}
        return epoch, int(self._orders[epoch][offset])


class _WorkerInit:
    """Runs first in every grain worker process: no accelerator for it (a worker that initialises
    JAX's GPU backend holds GPU memory), and no OpenCV thread pool per worker."""

    def __init__(self, hide_accelerators: bool) -> None:
        self.hide_accelerators = hide_accelerators

    def __call__(self, worker_index: int, worker_count: int) -> None:
        if self.hide_accelerators:
            os.environ["CUDA_VISIBLE_DEVICES"] = ""
            os.environ["JAX_PLATFORMS"] = "cpu"
        import cv2

        cv2.setNumThreads(0)


class _ReadSample:
    """(epoch, item) -> its training sample (picklable for grain's worker processes)."""

    def __init__(self, reader: SampleReader) -> None:
        self.reader = reader

    def __call__(self, key: tuple[int, int]):
        return self.reader.sample(key[0], key[1], True)


def _as_host_batch(samples) -> HostBatch:
    images, labels, boxes, flips = collate(samples)
    return (images, boxes, flips), labels


class JaxInput:
    """Host batches of this process, ((uint8 NHWC, boxes, flips), labels), for ``total_steps`` steps."""

    def __init__(self, plan: InputPlan, global_batch: int, process_index: int, process_count: int,
                 total_steps: int) -> None:
        if plan.decode_device != "cpu":
            raise DataError("[data] decode_device = \"gpu\" is a PyTorch option (torchvision's nvJPEG); "
                            "JAX decodes on the CPU")
        self.plan, self.global_batch = plan, global_batch
        self.local = global_batch // process_count
        self.reader = SampleReader(plan)
        self.steps_per_epoch = plan.steps_per_epoch(global_batch)
        if not self.steps_per_epoch:
            raise DataError(f"{plan.index.root}: fewer items than one global batch of {global_batch}")
        epochs = -(-total_steps // self.steps_per_epoch) + 1  # +1: the one batch read ahead
        self.keys = _EpochKeys(plan, global_batch, process_index * self.local, self.local, epochs)
        self._batches: Iterator[HostBatch] | None = None

    def _iterator(self) -> Iterator[HostBatch]:
        grain = _grain()
        dataset = (grain.MapDataset.source(self.keys).map(_ReadSample(self.reader))
                   .batch(self.local, drop_remainder=True, batch_fn=_as_host_batch))
        threads = 1 if self.plan.workers else max(1, min(16, os.cpu_count() or 1))
        iterable = dataset.to_iter_dataset(grain.ReadOptions(num_threads=threads,
                                                             prefetch_buffer_size=self.plan.prefetch * self.local))
        if self.plan.workers:  # decode in worker processes, each prefetching `prefetch` batches
            iterable = iterable.mp_prefetch(grain.MultiprocessingOptions(
                num_workers=self.plan.workers, per_worker_buffer_size=self.plan.prefetch),
                worker_init_fn=_WorkerInit(self.plan.hide_cuda_in_workers))
        return iter(iterable)

    def close(self) -> None:
        """Stop grain's worker processes (and free their shared memory) before the process exits."""
        close = getattr(self._batches, "close", None)
        if close is not None:
            close()
        self._batches = None

    def next_host_batch(self) -> HostBatch:
        if self._batches is None:
            self._batches = self._iterator()
        return next(self._batches)

    def eval_batches(self, batch: int) -> Iterator[tuple[HostBatch, int]]:
        """(host batch padded to ``batch``, valid count) over the whole test split (every process scores
        all of it, as the array path does)."""
        items = self.plan.test_items
        for lo in range(0, len(items), batch):
            chunk = [self.reader.sample(0, int(i), False) for i in items[lo:lo + batch]]
            valid = len(chunk)
            chunk += [chunk[-1]] * (batch - valid)  # one compiled shape; the padding is masked out
            yield _as_host_batch(chunk), valid
