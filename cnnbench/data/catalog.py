"""Every dataset by name: array datasets (:mod:`cnnbench.data.arrays`) and file datasets
(:mod:`cnnbench.data.files`), with what each looks like before anything is loaded."""

from __future__ import annotations

import os
from typing import Any

from cnnbench.data import arrays, files
from cnnbench.data.arrays import DatasetInfo
from cnnbench.errors import DataError

DATASETS = arrays.DATASETS + ("image_folder", "video")
FILE_DATASETS = ("cifar10", "image_folder", "video")
# What `input_source` says for each dataset: resident synthetic tensors, whole arrays in memory,
# image files decoded by loader workers, or the frames of a video.
INPUT_SOURCES = {"synthetic": "synthetic", "digits": "arrays", "cifar10": "arrays", "image_folder": "files",
                 "video": "video"}


def scan(name: str, path: str, frames: int = 0) -> files.FileIndex:
    """The file index of an image_folder or video dataset (``frames``: a video's first N, 0: all);
    ``path`` may name environment variables (``$CNNBENCH_DATA/samples/train``)."""
    if "$" in path:
        expanded = os.path.expandvars(path)
        if "$" in expanded:
            raise DataError(f"{name}: {path}: names an environment variable that is not set")
        path = expanded
    if name == "image_folder":
        return files.scan_image_folder(path)
    return files.scan_video(path, frames)


def dataset_info(name: str, path: str | None = None, image_size: tuple[int, int] = (32, 32),
                 channels: int = 3, num_classes: int = 10, synthetic_size: int = 0,
                 data: Any = None) -> DatasetInfo:
    """Shape and sizes of a dataset; file datasets are listed (headers only), not decoded."""
    if name not in ("image_folder", "video"):
        return arrays.dataset_info(name, path, image_size, channels, num_classes, synthetic_size)
    if not path:
        raise DataError(f"{name}: no data_path")
    index = scan(name, path, getattr(data, "frames", 0))
    files.check_sizes(index, tuple(image_size), getattr(data, "resize", True))
    train, test = files.split(index, getattr(data, "test_fraction", 0.2))
    classes = len(index.classes) if index.labelled else num_classes
    labelled = index.labelled or name == "video"  # video frames train with label 0 (throughput only)
    return DatasetInfo(tuple(image_size), 3, classes, len(train), len(test), labelled)
