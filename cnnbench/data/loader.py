"""The framework-neutral half of every real-data input pipeline: what each step's batch holds.

A framework's loader (PyTorch ``DataLoader``, ``tf.data``, grain) only runs the work this module
describes, in parallel and ahead of time:

- :class:`InputPlan` -- per run: the source (image files, video frames or in-memory uint8 images), the
  items of the train and test splits, the crop kinds, the normalisation, the model's input size;
- :meth:`InputPlan.step_items` -- the items of one step for one process, from the seeded epoch order
  (every framework and every worker count sees the same images in the same order);
- :class:`SampleReader` -- item -> uint8 HWC pixels padded into the dataset's canvas (so a batch is one
  array whatever the source sizes), its crop box and flip from :func:`cnnbench.data.augment.crop_draws`,
  and the corrupt-image policy. An image larger than HOST_CANVAS_FACTOR x the model's input (in either
  side) is first shrunk on the host (OpenCV's area filter) to fit that bound, its box scaled with it:
  the crop is drawn from the image's own size, so every framework still crops the same region, while
  the canvas, and the uint8 batch crossing to the device, stay bounded by the model's size (a folder of
  portrait and landscape 1080p photographs trained at 32x32 moved 1920x1920 canvases before).

Batches cross to the device as uint8 NHWC; each backend's ``transforms.prepare`` crops, resizes, flips,
converts and normalises there.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cnnbench.data import files
from cnnbench.data.augment import crop_draws
from cnnbench.data.normalize import IMAGENET_MEAN, IMAGENET_STD
from cnnbench.errors import DataError

# Where every process of a run (loader workers and threads included) appends one line per skipped input:
# set by the launcher, read by it when the run ends (cnnbench.run.launch), so the row counts the skips of
# every framework's pipeline without each passing counts back through its batches.
SKIP_LOG_ENV = "CNNBENCH_SKIP_LOG"
UINT8_DATASETS = ("cifar10", "image_folder", "video")
# The host shrinks an image to at most this many times the model's input height and width. Why 4: the
# smallest crop random_resized_crop draws covers 8% of the area, a 0.28 share of each side, so at 4x the
# model's size it still holds more than one source pixel per output pixel.
HOST_CANVAS_FACTOR = 4  # batches cross as uint8, prepared on the device
# The trainers with a uint8 input path; others read cifar10 as float arrays and refuse files and video.
UINT8_STRATEGIES = {"torch": ("ddp",), "tensorflow": ("mirrored",), "jax": ("sharded", "pmap", "tensor", "data+tensor")}


def reads_uint8(run: Any) -> bool:
    """Whether the run's input crosses to the device as uint8 frames (prepared there)."""
    return run.dataset in UINT8_DATASETS and run.strategy in UINT8_STRATEGIES.get(run.backend, ())


def input_unsupported(run: Any) -> tuple[str, str] | None:
    """(spec field, why) a training run cannot read its dataset as asked, else None."""
    if run.dataset in ("image_folder", "video") and not reads_uint8(run):
        paths = ", ".join(f"{b}/{s}" for b, strategies in UINT8_STRATEGIES.items() for s in strategies)
        return "dataset", f"{run.backend}/{run.strategy} reads array datasets only; {run.dataset} trains under {paths}"
    if run.data.decode_device == "gpu":
        if run.device_kind != "gpu":
            return "data.decode_device", "\"gpu\" (nvJPEG) needs a GPU run; this run is on the CPU: use \"cpu\""
        if run.backend != "torch":
            return "data.decode_device", (f"\"gpu\" is PyTorch's (torchvision.io.decode_jpeg); {run.backend} "
                                          f"decodes on the CPU")
        if run.dataset != "image_folder":
            return "data.decode_device", f"\"gpu\" decodes JPEG image folders only, not {run.dataset}"
    return None
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)


@dataclass(frozen=True)
class Sample:
    """One item ready for collation: pixels in the canvas, label, crop box, flip, decoded size."""

    pixels: np.ndarray  # uint8 (canvas_h, canvas_w, 3)
    label: int
    box: np.ndarray  # float32 (4,) = (y0, x0, h, w)
    flip: bool


def record_skip(source: str, reason: str) -> None:
    """Append ``source<TAB>reason`` to the run's skip log (one ``write`` on an O_APPEND file: lines of
    concurrent processes and threads do not interleave); nothing outside a launched run."""
    path = os.environ.get(SKIP_LOG_ENV)
    if not path:
        return
    line = (source.replace("\t", " ") + "\t" + " ".join(reason.split()) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read_skip_log(path: Path) -> list[tuple[str, str]]:
    """(source, reason) of each distinct input skipped, in the order first met."""
    if not path.is_file():
        return []
    found: dict[str, str] = {}
    for line in path.read_text(errors="replace").splitlines():
        source, _, reason = line.partition("\t")
        found.setdefault(source, reason)
    return list(found.items())


class SampleReader:
    """Reads items of one source in any process (picklable: a video is reopened in each worker)."""

    def __init__(self, plan: InputPlan) -> None:
        self.plan = plan
        self._video = None
        # One decoder per video per process, used by one thread at a time (FFmpeg's decoder is not
        # thread-safe; tf.data and grain call readers from thread pools).
        self._video_lock = threading.Lock()
        self.skipped = 0

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_video": None, "_video_lock": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _video_lock=threading.Lock())

    def raw_bytes(self, item: int) -> bytes:
        """The encoded file of an image item (GPU decode reads bytes only)."""
        return Path(self.plan.index.files[item]).read_bytes()

    def _decode(self, item: int) -> np.ndarray:
        plan = self.plan
        if plan.arrays is not None:
            return plan.arrays[item]
        if plan.index.kind == "video":
            with self._video_lock:
                if self._video is None:
                    from cnnbench.data.decode import open_video

                    files.quiet_video_decoder()
                    self._video = open_video(Path(plan.index.root))
                return self._video.read(item)
        from cnnbench.data.decode import read_image

        return read_image(Path(plan.index.files[item]))

    def pixels(self, item: int) -> tuple[np.ndarray, int]:
        """(uint8 HWC pixels, the item actually read): with corrupt = "skip" a bad item is replaced by
        the next good one (counted, warned on stderr); with "fail" its DataError propagates."""
        count = self.plan.size
        for offset in range(count):
            candidate = (item + offset) % count
            try:
                return self._decode(candidate), candidate
            except DataError as exc:
                if self.plan.corrupt != "skip":
                    raise
                self.skipped += 1
                record_skip(self.plan.index.source_name(candidate), str(exc))
                print(f"warning: skipped corrupt input ({self.skipped} in process {os.getpid()}): {exc}",
                      file=sys.stderr, flush=True)
        raise DataError(f"{self.plan.index.root}: no item could be decoded")

    def sample(self, epoch: int, item: int, train: bool) -> Sample:
        image, used = self.pixels(item)
        height, width = image.shape[:2]
        # drawn from the image's own size: the same crop whatever the host does to its pixels next
        box, flip = self.plan.draw(epoch, used, (height, width), train)
        shrunk = host_size((height, width), self.plan.host_bound)
        if shrunk != (height, width):
            import cv2

            image = cv2.resize(image, shrunk[::-1], interpolation=cv2.INTER_AREA)
            box = box * np.array([shrunk[0] / height, shrunk[1] / width] * 2, np.float32)
            height, width = shrunk
        canvas_h, canvas_w = self.plan.canvas_hw
        if height > canvas_h or width > canvas_w:
            raise DataError(f"{self.plan.index.source_name(used)}: decoded {height}x{width}, larger than its "
                            f"header said (canvas {canvas_h}x{canvas_w})")
        if (height, width) == (canvas_h, canvas_w):
            canvas = np.ascontiguousarray(image)
        else:  # pad into the canvas (top-left); the box addresses the image's own pixels
            canvas = np.zeros((canvas_h, canvas_w, 3), np.uint8)
            canvas[:height, :width] = image
        return Sample(canvas, int(self.plan.labels[used]), box, flip)


@dataclass
class InputPlan:
    """What one run's input pipeline reads, in which order, and how each frame is prepared."""

    dataset: str
    index: files.FileIndex
    arrays: np.ndarray | None  # in-memory uint8 NHWC images (cifar10), else None
    labels: np.ndarray
    train_items: np.ndarray
    test_items: np.ndarray
    out_hw: tuple[int, int]
    train_kind: str
    eval_kind: str
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    seed: int
    shuffle: bool
    shuffle_buffer: int
    corrupt: str
    workers: int
    prefetch: int
    pin_memory: bool
    decode_device: str
    hide_cuda_in_workers: bool

    @property
    def size(self) -> int:
        return len(self.labels)

    @property
    def host_bound(self) -> tuple[int, int]:
        """The largest height and width an image keeps on the host (see HOST_CANVAS_FACTOR)."""
        return HOST_CANVAS_FACTOR * self.out_hw[0], HOST_CANVAS_FACTOR * self.out_hw[1]

    @functools.cached_property
    def canvas_hw(self) -> tuple[int, int]:
        """The uint8 batch's height and width: every item as the host keeps it (shrunk to the bound)."""
        kept = np.array([host_size(tuple(hw), self.host_bound) for hw in self.index.sizes]).reshape(-1, 2)
        return int(kept[:, 0].max()), int(kept[:, 1].max())

    def draw(self, epoch: int, item: int, src_hw: tuple[int, int], train: bool) -> tuple[np.ndarray, bool]:
        kind = self.train_kind if train else self.eval_kind
        draws = crop_draws(self.seed, epoch, np.array([item]), src_hw, kind, self.out_hw)
        return draws.boxes[0], bool(draws.flips[0])

    def steps_per_epoch(self, global_batch: int) -> int:
        return len(self.train_items) // global_batch

    def step_items(self, epoch: int, step: int, global_batch: int, lo: int = 0, count: int | None = None
                   ) -> np.ndarray:
        """Items of one step: the epoch's order cut into global batches; [lo, lo + count) of it is
        one process's (or one rank's) share."""
        order = self.epoch_order(epoch)
        batch = order[step * global_batch:(step + 1) * global_batch]
        return batch[lo:lo + (global_batch if count is None else count)]

    def epoch_order(self, epoch: int) -> np.ndarray:
        return files.epoch_order(self.train_items, self.seed, epoch, self.shuffle_buffer, self.shuffle)

    def is_jpeg_folder(self) -> bool:
        return self.index.kind == "image_folder" and all(
            f.lower().endswith(files.JPEG_SUFFIXES) for f in self.index.files)


def host_size(hw: tuple[int, int], bound: tuple[int, int]) -> tuple[int, int]:
    """(height, width) an image of ``hw`` keeps on the host: as it is when it fits ``bound``, else
    shrunk, aspect kept, until it does."""
    height, width = int(hw[0]), int(hw[1])
    scale = min(1.0, bound[0] / height, bound[1] / width)
    if scale == 1.0:
        return height, width
    return max(1, min(bound[0], round(height * scale))), max(1, min(bound[1], round(width * scale)))


def _cifar10_index(count: int) -> files.FileIndex:
    sizes = np.full((count, 2), 32, np.int32)
    return files.FileIndex("arrays", "cifar10", (), np.zeros(count, np.int64), (), sizes)


def plan_for(run: Any, arrays: np.ndarray | None = None, labels: np.ndarray | None = None) -> InputPlan:
    """The input plan of a run on a uint8 dataset; ``arrays``/``labels``: cifar10's training images
    (uint8 NHWC) held in memory."""
    data = run.data  # the [data] table (cnnbench.options.DataSpec)
    augment = data.augment
    if run.dataset == "cifar10":
        if arrays is None or labels is None:
            raise ValueError("cifar10 needs its uint8 arrays")
        index = _cifar10_index(len(labels))
        train_items, test_items = np.arange(len(labels)), np.arange(0)
        train_kind = "pad_crop" if augment == "auto" else augment
        eval_kind, mean, std, shuffle = "none", CIFAR10_MEAN, CIFAR10_STD, True
    else:
        from cnnbench.data.catalog import scan

        index = scan(run.dataset, run.data_path, data.frames)
        files.check_sizes(index, tuple(run.image_size), data.resize)
        labels = np.maximum(index.labels, 0)
        train_items, test_items = files.split(index, data.test_fraction)
        video = run.dataset == "video"
        train_kind = ("none" if video else "random_resized_crop") if augment == "auto" else augment
        eval_kind = "none" if video else "center"
        if not data.resize:
            train_kind = eval_kind = "none"
        mean, std = IMAGENET_MEAN, IMAGENET_STD
        # A video is read in order unless a shuffle buffer is asked for (seeks are expensive).
        shuffle = not video or bool(data.shuffle_buffer)
    return InputPlan(
        dataset=run.dataset, index=index, arrays=arrays, labels=np.asarray(labels, np.int64),
        train_items=train_items, test_items=test_items, out_hw=tuple(run.image_size), train_kind=train_kind,
        eval_kind=eval_kind, mean=tuple(mean), std=tuple(std), seed=run.seed, shuffle=shuffle,
        shuffle_buffer=data.shuffle_buffer, corrupt=data.corrupt, workers=data.workers, prefetch=data.prefetch,
        pin_memory=data.pin_memory, decode_device=data.decode_device, hide_cuda_in_workers=data.hide_cuda_in_workers,
    )


def collate(samples: list[Sample]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(uint8 NHWC images, int64 labels, float32 boxes, bool flips) of one batch."""
    return (np.stack([s.pixels for s in samples]), np.array([s.label for s in samples], np.int64),
            np.stack([s.box for s in samples]).astype(np.float32), np.array([s.flip for s in samples], bool))


def _axis_taps(start: np.ndarray, length: np.ndarray, out: int, size: int, flips: np.ndarray | None):
    coords = start[:, None] + (np.arange(out) + 0.5)[None, :] * (length / out)[:, None] - 0.5
    if flips is not None:
        coords = np.where(flips[:, None], coords[:, ::-1], coords)
    inside = (coords >= -0.5) & (coords <= size - 0.5)
    coords = np.clip(coords, 0.0, size - 1.0)
    low = np.floor(coords).astype(np.int64)
    return low, np.minimum(low + 1, size - 1), (coords - low).astype(np.float32), inside


def prepare_on_host(images: np.ndarray, boxes: np.ndarray, flips: np.ndarray, out_hw: tuple[int, int],
                    mean, std) -> np.ndarray:
    """The on-device ``prepare`` computed with numpy (uint8 NHWC -> float32 NCHW): `cnnbench infer` hands
    its models host batches, so frames from files are prepared here, off the clock."""
    n, height, width, _ = images.shape
    y0, y1, wy, y_in = _axis_taps(boxes[:, 0], boxes[:, 2], out_hw[0], height, None)
    x0, x1, wx, x_in = _axis_taps(boxes[:, 1], boxes[:, 3], out_hw[1], width, flips)
    batch = np.arange(n)[:, None]
    top, bottom = images[batch, y0].astype(np.float32), images[batch, y1].astype(np.float32)
    rows = top + (bottom - top) * wy[:, :, None, None]
    index = np.arange(out_hw[0])[None, :, None]
    left, right = rows[batch[:, :, None], index, x0[:, None, :]], rows[batch[:, :, None], index, x1[:, None, :]]
    out = (left + (right - left) * wx[:, None, :, None]) * (y_in[:, :, None] & x_in[:, None, :])[..., None]
    out = (out / 255.0 - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2), dtype=np.float32)


def host_pixels(run: Any, count: int) -> np.ndarray:
    """``count`` frames of a file dataset (cycling through its items) for inference: uint8 NHWC of the
    run's image size (evaluation crop: center for image folders, the whole frame for video), resampled
    on the host by the same formula as the on-device ``prepare`` (``cnnbench infer`` then copies and
    normalises them as its input mode says)."""
    plan = plan_for(run)
    reader = SampleReader(plan)
    samples = [reader.sample(0, int(plan.train_items[k % len(plan.train_items)]), False) for k in range(count)]
    images, _, boxes, flips = collate(samples)
    channels = images.shape[-1]
    # mean 0 and std 1/255 leave the resampled pixels on their 0-255 scale
    resampled = prepare_on_host(images, boxes, flips, plan.out_hw, (0.0,) * channels, (1 / 255,) * channels)
    return np.ascontiguousarray(np.clip(np.rint(resampled), 0, 255).astype(np.uint8).transpose(0, 2, 3, 1))
