"""Data sources as numpy arrays, free of any deep-learning framework.

Every source yields images as float32 NCHW, normalised per channel, and int64 labels; backends
convert the layout once at load time (NHWC for TensorFlow and JAX), never per step.

- ``synthetic``: fixed-seed random images and labels; backends keep one global batch resident
  on the devices, so throughput excludes input.
- ``digits``: the 8x8 handwritten digits that ship with scikit-learn (real images, no download),
  split into train/test with a fixed-seed stratified split.
- ``cifar10``: CIFAR-10 read from a local folder in the official *binary* format
  (``data_batch_1.bin`` ... ``data_batch_5.bin``, ``test_batch.bin``); never unpickled.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cnnbench.errors import DataError

DATASETS = ("synthetic", "digits", "cifar10")

CIFAR10_TRAIN_FILES = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
CIFAR10_TEST_FILE = "test_batch.bin"
CIFAR10_RECORD_BYTES = 1 + 3 * 32 * 32  # label byte, then R, G, B planes of 32x32
# Channel statistics of the CIFAR-10 training set (widely published values).
CIFAR10_MEAN = np.array([0.4914, 0.4822, 0.4465], dtype=np.float32)
CIFAR10_STD = np.array([0.2470, 0.2435, 0.2616], dtype=np.float32)

DIGITS_TEST_FRACTION = 0.2


@dataclass(frozen=True)
class DatasetInfo:
    """What a dataset looks like, known without loading it."""

    image_size: tuple[int, int]  # (height, width)
    channels: int
    num_classes: int
    train_size: int
    test_size: int
    labelled: bool = True  # False for a flat image folder (inference only)


@dataclass(frozen=True)
class Dataset:
    """Images (N, C, H, W) float32 and labels (N,) int64; test arrays are empty for synthetic."""

    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    num_classes: int

    @property
    def has_test(self) -> bool:
        return len(self.test_y) > 0


def cifar10_dir(path: str | None) -> Path:
    """The folder holding the CIFAR-10 binary files: the spec's path, else $CNNBENCH_DATA/cifar10."""
    if path:
        folder = Path(path).expanduser()
    elif os.environ.get("CNNBENCH_DATA"):
        folder = Path(os.environ["CNNBENCH_DATA"]).expanduser() / "cifar10"
    else:
        raise DataError("cifar10: no data path: set `data_path` in the spec or CNNBENCH_DATA")
    # The official archive unpacks into cifar-10-batches-bin/; accept its parent too.
    if not (folder / CIFAR10_TEST_FILE).exists() and (folder / "cifar-10-batches-bin").is_dir():
        folder = folder / "cifar-10-batches-bin"
    return folder


def _cifar10_file_records(file: Path) -> int:
    if not file.is_file():
        raise DataError(f"cifar10: missing file {file}")
    size = file.stat().st_size
    if size == 0 or size % CIFAR10_RECORD_BYTES:
        raise DataError(
            f"cifar10: malformed file {file}: {size} bytes is not a whole number of "
            f"{CIFAR10_RECORD_BYTES}-byte records"
        )
    return size // CIFAR10_RECORD_BYTES


def dataset_info(
    name: str, path: str | None = None, image_size: tuple[int, int] = (32, 32), channels: int = 3,
    num_classes: int = 10, synthetic_size: int = 0,
) -> DatasetInfo:
    """Shape and sizes of a dataset; checks that files exist without reading them whole."""
    if name == "digits":
        return DatasetInfo((8, 8), 1, 10, 1797 - _digits_test_count(), _digits_test_count())
    if name == "cifar10":
        folder = cifar10_dir(path)
        train = sum(_cifar10_file_records(folder / f) for f in CIFAR10_TRAIN_FILES)
        test = _cifar10_file_records(folder / CIFAR10_TEST_FILE)
        return DatasetInfo((32, 32), 3, 10, train, test)
    if name == "synthetic":
        return DatasetInfo(tuple(image_size), channels, num_classes, synthetic_size, 0)
    raise DataError(f"unknown dataset {name!r}; expected one of {', '.join(DATASETS)}")


def _digits_test_count() -> int:
    # Stratified split rounds per class; computing it from the labels keeps it exact.
    return len(_digits_split()[3])


def _digits_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = digits.images.astype(np.float32)[:, None, :, :] / 16.0
    y = digits.target.astype(np.int64)
    return tuple(  # type: ignore[return-value]
        train_test_split(x, y, test_size=DIGITS_TEST_FRACTION, stratify=y, random_state=0)
    )


def _standardize(train: np.ndarray, test: np.ndarray, mean: np.ndarray, std: np.ndarray):
    shape = (1, -1, 1, 1)
    return ((train - mean.reshape(shape)) / std.reshape(shape)).astype(np.float32), (
        (test - mean.reshape(shape)) / std.reshape(shape)
    ).astype(np.float32)


def load_digits_dataset() -> Dataset:
    train_x, test_x, train_y, test_y = _digits_split()
    mean = np.array([train_x.mean()], dtype=np.float32)
    std = np.array([train_x.std()], dtype=np.float32)
    train_x, test_x = _standardize(train_x, test_x, mean, std)
    return Dataset(train_x, train_y, test_x, test_y, 10)


def read_cifar10_file(file: Path) -> tuple[np.ndarray, np.ndarray]:
    """One binary batch file -> (uint8 images N x 3 x 32 x 32, int64 labels)."""
    count = _cifar10_file_records(file)
    raw = np.fromfile(file, dtype=np.uint8).reshape(count, CIFAR10_RECORD_BYTES)
    labels = raw[:, 0].astype(np.int64)
    if labels.max(initial=0) > 9:
        raise DataError(f"cifar10: malformed file {file}: label {labels.max()} outside 0..9")
    return raw[:, 1:].reshape(count, 3, 32, 32), labels


def load_cifar10_dataset(path: str | None) -> Dataset:
    folder = cifar10_dir(path)
    parts = [read_cifar10_file(folder / f) for f in CIFAR10_TRAIN_FILES]
    train_x = np.concatenate([p[0] for p in parts]).astype(np.float32) / 255.0
    train_y = np.concatenate([p[1] for p in parts])
    test_u8, test_y = read_cifar10_file(folder / CIFAR10_TEST_FILE)
    train_x, test_x = _standardize(
        train_x, test_u8.astype(np.float32) / 255.0, CIFAR10_MEAN, CIFAR10_STD
    )
    return Dataset(train_x, train_y, test_x, test_y, 10)


def load_cifar10_uint8(path: str | None) -> tuple[np.ndarray, np.ndarray, Dataset]:
    """(training images uint8 NHWC, their labels, the Dataset with the normalised test split only):
    training batches are augmented and normalised on the device (pad-4 crop + flip)."""
    folder = cifar10_dir(path)
    parts = [read_cifar10_file(folder / f) for f in CIFAR10_TRAIN_FILES]
    train_u8 = np.ascontiguousarray(np.concatenate([p[0] for p in parts]).transpose(0, 2, 3, 1))
    train_y = np.concatenate([p[1] for p in parts])
    test_u8, test_y = read_cifar10_file(folder / CIFAR10_TEST_FILE)
    _, test_x = _standardize(test_u8[:0].astype(np.float32), test_u8.astype(np.float32) / 255.0,
                             CIFAR10_MEAN, CIFAR10_STD)
    empty = np.zeros((0, 3, 32, 32), np.float32)
    return train_u8, train_y, Dataset(empty, train_y, test_x, test_y, 10)


def synthetic_dataset(
    size: int, image_size: int | tuple[int, int], channels: int, num_classes: int, seed: int
) -> Dataset:
    height, width = (image_size, image_size) if isinstance(image_size, int) else image_size
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((size, channels, height, width), dtype=np.float32)
    y = rng.integers(0, num_classes, size=size, dtype=np.int64)
    empty_x = np.zeros((0, channels, height, width), np.float32)
    return Dataset(x, y, empty_x, np.zeros((0,), np.int64), num_classes)


def write_cifar10_file(file: Path, images: np.ndarray, labels: np.ndarray) -> None:
    """Write uint8 images (N, 3, 32, 32) and labels in the official binary record format."""
    records = np.concatenate(
        [labels.astype(np.uint8)[:, None], images.astype(np.uint8).reshape(len(labels), -1)],
        axis=1,
    )
    file.write_bytes(records.tobytes())
