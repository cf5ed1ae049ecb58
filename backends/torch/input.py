"""PyTorch's input pipeline for uint8 sources (image folders, video, CIFAR-10): a ``DataLoader`` set up
as PyTorch users tune it, the batch prepared on the device.

- Workers (``[data] workers``) decode in parallel; ``worker_init_fn`` seeds each worker, hides CUDA from
  it (``CUDA_VISIBLE_DEVICES=""`` before any CUDA use: a worker that creates a CUDA context costs
  hundreds of MiB of GPU memory each; ``hide_cuda_in_workers = false`` leaves that out, to measure it)
  and sets ``cv2.setNumThreads(0)`` (OpenCV's own thread pool in every worker oversubscribes the cores).
- ``persistent_workers`` (the one endless iterator stays in the loader, where ``close()`` stops it),
  ``prefetch_factor`` (``[data] prefetch``), ``pin_memory`` so that the uint8 batch is copied with
  ``non_blocking=True``.
- The batch sampler takes each rank's share of the neutral epoch order
  (:meth:`cnnbench.data.loader.InputPlan.step_items`), so the images and crops match the other frameworks.
  It runs epoch after epoch without end, so the workers read ahead across epoch boundaries, as tf.data and
  grain do here: a sampler per epoch drains the pipeline at every boundary, and the first batches of the
  next epoch then cost a whole batch's decode in one worker (on the H200, 200 ms steps instead of 55).
- ``decode_device = "gpu"``: workers only read the JPEG bytes; ``torchvision.io.decode_jpeg(device="cuda")``
  decodes the batch on the GPU (nvJPEG). torchvision is imported only then.
- On the device: ``backends.torch.transforms.prepare`` (crop + resize + flip + float + normalise).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import numpy as np
import torch

from cnnbench.data.loader import InputPlan, SampleReader, collate
from cnnbench.errors import DataError


def worker_init(worker_id: int, seed: int, hide_cuda: bool) -> None:
    """Runs first in every DataLoader worker process."""
    if hide_cuda:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before anything in the worker could touch CUDA
    import random

    import cv2

    cv2.setNumThreads(0)
    worker_seed = seed * 1000 + worker_id
    random.seed(worker_seed)
    np.random.seed(worker_seed % 2**32)
    torch.manual_seed(worker_seed)


class _WorkerInit:
    """A picklable worker_init_fn (workers may be started by spawn or forkserver)."""

    def __init__(self, seed: int, hide_cuda: bool) -> None:
        self.seed, self.hide_cuda = seed, hide_cuda

    def __call__(self, worker_id: int) -> None:
        worker_init(worker_id, self.seed, self.hide_cuda)


class _Items(torch.utils.data.Dataset):
    """Item (epoch, index, train) -> one sample's arrays (or its encoded bytes for GPU decode)."""

    def __init__(self, plan: InputPlan, encoded: bool) -> None:
        self.reader, self.encoded = SampleReader(plan), encoded

    def __len__(self) -> int:
        return self.reader.plan.size

    def __getitem__(self, key: tuple[int, int, bool]):
        epoch, item, train = key
        if self.encoded:
            plan = self.reader.plan
            box, flip = plan.draw(epoch, item, tuple(plan.index.sizes[item]), train)
            return (torch.frombuffer(bytearray(self.reader.raw_bytes(item)), dtype=torch.uint8),
                    int(plan.labels[item]), box, flip, plan.index.files[item])
        return self.reader.sample(epoch, item, train)


def _collate_arrays(samples):
    images, labels, boxes, flips = collate(samples)
    return torch.from_numpy(images), torch.from_numpy(labels), torch.from_numpy(boxes), torch.from_numpy(flips)


def _collate_encoded(samples):
    data, labels, boxes, flips, names = zip(*samples)
    return (list(data), torch.tensor(labels, dtype=torch.int64), torch.from_numpy(np.stack(boxes)),
            torch.tensor(flips, dtype=torch.bool), list(names))


class _StepSampler(torch.utils.data.Sampler):
    """Batches of (epoch, item, train) keys: this rank's slice of every global batch, epoch after epoch."""

    def __init__(self, plan: InputPlan, global_batch: int, lo: int, count: int) -> None:
        self.plan, self.global_batch, self.lo, self.count = plan, global_batch, lo, count
        self.steps_per_epoch = plan.steps_per_epoch(global_batch)

    def __iter__(self) -> Iterator[list[tuple[int, int, bool]]]:
        for epoch in itertools.count():
            order = self.plan.epoch_order(epoch)
            for step in range(self.steps_per_epoch):
                batch = order[step * self.global_batch:(step + 1) * self.global_batch][self.lo:self.lo + self.count]
                yield [(epoch, int(item), True) for item in batch]


class _EvalSampler(torch.utils.data.Sampler):
    def __init__(self, items: np.ndarray, batch: int) -> None:
        self.items, self.batch = items, batch

    def __len__(self) -> int:
        return -(-len(self.items) // self.batch)

    def __iter__(self):
        for lo in range(0, len(self.items), self.batch):
            yield [(0, int(item), False) for item in self.items[lo:lo + self.batch]]


class TorchInput:
    """Device-ready batches (float NCHW images, labels) of one rank, from a uint8 source."""

    def __init__(self, plan: InputPlan, device: torch.device, global_batch: int, rank: int, world: int,
                 channels_last: bool) -> None:
        self.plan, self.device, self.channels_last = plan, device, channels_last
        on_gpu = device.type == "cuda"
        self.gpu_decode = plan.decode_device == "gpu"
        if self.gpu_decode:
            if not on_gpu:
                raise DataError("[data] decode_device = \"gpu\" needs a CUDA device; this run is on the CPU")
            if not plan.is_jpeg_folder():
                raise DataError("[data] decode_device = \"gpu\" decodes JPEG image folders only "
                                f"({plan.dataset} {plan.index.root})")
        self.pin = plan.pin_memory and on_gpu
        # Copies run on their own stream: on the compute stream a batch's copy would wait for the
        # previous step to finish instead of overlapping it.
        self.copy_stream = torch.cuda.Stream(device) if on_gpu and self.pin else None
        local = global_batch // world
        self.sampler = _StepSampler(plan, global_batch, rank * local, local)
        self.loader = self._loader(self.sampler, persistent=True)
        self.steps_per_epoch = self.sampler.steps_per_epoch
        self.eval_items = plan.test_items[rank::world]
        self.eval_batch = 2 * local
        self._batches = self.host_batches()

    def _loader(self, sampler, persistent: bool) -> torch.utils.data.DataLoader:
        plan, workers = self.plan, self.plan.workers
        extra = {}
        if workers:
            extra = {"persistent_workers": persistent, "prefetch_factor": plan.prefetch,
                     "worker_init_fn": _WorkerInit(plan.seed, plan.hide_cuda_in_workers)}
        return torch.utils.data.DataLoader(
            _Items(plan, self.gpu_decode), batch_sampler=sampler, num_workers=workers, pin_memory=self.pin,
            collate_fn=_collate_encoded if self.gpu_decode else _collate_arrays, **extra)

    def to_device(self, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """One host batch (of :meth:`host_batches`) -> device-ready (images, labels); the copies are queued,
        not waited for. Train and test batches differ only in the draws they carry (boxes, flips)."""
        from backends.torch.transforms import prepare

        images, labels, boxes, flips = batch[:4]
        if self.gpu_decode:
            images = self._decode_on_gpu(images, batch[4])
        elif self.copy_stream is not None:
            compute = torch.cuda.current_stream(self.device)
            with torch.cuda.stream(self.copy_stream):
                images = images.to(self.device, non_blocking=True)
                labels = labels.to(self.device, non_blocking=True)
            compute.wait_stream(self.copy_stream)  # prepare() starts once the bytes are there
            images.record_stream(compute)  # the caching allocator must not reuse them early
            labels.record_stream(compute)
        else:
            images = images.to(self.device, non_blocking=self.pin)
        # The draws stay numpy: prepare() sees on the host when a batch needs no resampling (whole frames
        # at the model's size) and copies them through pinned memory otherwise.
        x = prepare(images, boxes.numpy(), flips.numpy(), self.plan.out_hw, self.plan.mean, self.plan.std, "float32",
                    channels_last=self.channels_last)
        return x, labels.to(self.device, non_blocking=self.pin)

    def _decode_on_gpu(self, encoded: list[torch.Tensor], names: list[str]) -> torch.Tensor:
        """nvJPEG through torchvision: CHW uint8 on the GPU -> one NHWC canvas batch."""
        from torchvision.io import ImageReadMode, decode_jpeg

        try:
            decoded = decode_jpeg(encoded, mode=ImageReadMode.RGB, device=self.device)
        except RuntimeError as exc:
            raise DataError(f"GPU JPEG decode failed in a batch starting with {names[0]}: {exc}") from None
        canvas_h, canvas_w = self.plan.index.canvas_hw  # full-size images: no host shrinking on this path
        out = torch.zeros((len(decoded), canvas_h, canvas_w, 3), dtype=torch.uint8, device=self.device)
        for k, image in enumerate(decoded):
            out[k, :image.shape[1], :image.shape[2]] = image.permute(1, 2, 0)
        return out

    def host_batches(self) -> Iterator:
        """The loader's batches (pinned host tensors), epoch after epoch, each with its own order and draws."""
        yield from self.loader  # endless: the sampler runs epoch after epoch

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.to_device(next(self._batches))

    def close(self) -> None:
        """Stop the persistent workers (see :func:`backends.torch.common.shut_down_loader`)."""
        from backends.torch.common import shut_down_loader

        self._batches.close()
        shut_down_loader(self.loader)

    def eval_batches(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The test split of this rank, center-cropped (no workers kept alive for it)."""
        if not len(self.eval_items):
            return
        for batch in self._loader(_EvalSampler(self.eval_items, self.eval_batch), persistent=False):
            yield self.to_device(batch)
