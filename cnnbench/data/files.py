"""File datasets, framework-free: which files, which labels, which split, which order.

- ``image_folder``: a tree ``ROOT/CLASS/*.jpg|*.jpeg|*.png`` read as torchvision's ``ImageFolder``
  does (class folders sorted by name -> labels 0..K-1, files sorted within each class), or a flat
  folder of images without labels (inference only). The test split holds out every k-th file of
  each class (k = round(1 / test_fraction)), so it is the same on every machine and framework.
- ``video``: the frames of one video file, unlabelled (label 0), read in order.

Every framework's loader asks this module for the same things: the items of a split, the order of an
epoch (:func:`epoch_order`) and the source size of each item, so all three see the same images in the
same order and, through :mod:`cnnbench.data.augment`, with the same crops.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cnnbench.errors import DataError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
BAD_FILES_SHOWN = 10  # a message naming bad files names this many, then says how many more
JPEG_SUFFIXES = (".jpg", ".jpeg")


@dataclass(frozen=True)
class FileIndex:
    """The items of a file dataset: paths (images) or frame numbers (video), labels, source sizes."""

    kind: str  # image_folder | video
    root: str  # the folder, or the video file
    files: tuple[str, ...]  # image paths; empty for video
    labels: np.ndarray  # int64 (N,); -1 for a flat folder (no labels)
    classes: tuple[str, ...]
    sizes: np.ndarray  # int32 (N, 2): (height, width) of each item as stored

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def labelled(self) -> bool:
        return bool(len(self.classes))

    @property
    def canvas_hw(self) -> tuple[int, int]:
        """The uint8 batch holds every item of the dataset: the largest height and width."""
        return int(self.sizes[:, 0].max()), int(self.sizes[:, 1].max())

    def source_name(self, item: int) -> str:
        return self.files[item] if self.files else f"{self.root} frame {item}"


def _images_in(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


def header_size(path: Path) -> tuple[int, int]:
    """(height, width) from the file's header, without decoding the pixels."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            width, height = image.size
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise DataError(f"{path}: not a readable image ({type(exc).__name__}: {exc})") from None
    return height, width


def scan_image_folder(root: str | Path) -> FileIndex:
    """List an ImageFolder tree (or a flat folder); reads each file's header for its size."""
    folder = Path(root).expanduser()
    if not folder.exists():
        raise DataError(f"image_folder: {folder}: no such folder")
    if not folder.is_dir():
        raise DataError(f"image_folder: {folder}: not a folder")
    class_dirs = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    files: list[Path] = []
    labels: list[int] = []
    if class_dirs:
        for label, class_dir in enumerate(class_dirs):
            found = _images_in(class_dir)
            if not found:
                raise DataError(f"image_folder: class folder {class_dir} holds no .jpg/.jpeg/.png files")
            files += found
            labels += [label] * len(found)
        classes = tuple(p.name for p in class_dirs)
    else:
        files = _images_in(folder)
        labels = [-1] * len(files)
        classes = ()
    if not files:
        raise DataError(f"image_folder: {folder} holds no class folders and no .jpg/.jpeg/.png files")
    sizes, bad = [], []
    for path in files:  # every unreadable file is named at once, not one per attempt
        try:
            sizes.append(header_size(path))
        except DataError as exc:
            bad.append(str(exc))
    if bad:
        raise DataError(f"image_folder: {folder}: {bad_files_text(bad, len(files))}")
    sizes = np.array(sizes, np.int32).reshape(-1, 2)
    return FileIndex("image_folder", str(folder), tuple(map(str, files)), np.asarray(labels, np.int64),
                     classes, sizes)


def bad_files_text(problems: list[str], total: int, limit: int = BAD_FILES_SHOWN) -> str:
    """One line naming the first ``limit`` bad files of ``total``, then how many more there are."""
    shown = "; ".join(problems[:limit])
    more = f"; ... and {len(problems) - limit} more" if len(problems) > limit else ""
    return f"{len(problems)} of {total} files bad: {shown}{more}"


def incomplete_images(index: FileIndex) -> list[str]:
    """Why each image of a folder would fail to decode by its container alone (truncated, empty, no
    image signature), read whole but not decoded: what `cnnbench validate` lists before a run meets them
    one at a time. A file whose pixels are corrupt inside a complete container is found only by decoding."""
    from cnnbench.data.decode import check_container

    problems = []
    for name in index.files:
        try:
            check_container(Path(name).read_bytes(), name)
        except DataError as exc:
            problems.append(str(exc))
        except OSError as exc:
            problems.append(f"{name}: cannot read ({exc.strerror or exc})")
    return problems


def quiet_video_decoder() -> None:
    """FFmpeg and OpenCV print their own lines for a file they cannot open; the DataError says it once.
    Set before OpenCV's first video capture in this process (read then, not at import)."""
    os.environ.setdefault("OPENCV_LOG_LEVEL", "ERROR")
    os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")  # AV_LOG_QUIET


def scan_video(path: str | Path, frames: int = 0) -> FileIndex:
    """The frames of a video file (all, or the first ``frames``)."""
    from cnnbench.data.decode import open_video

    quiet_video_decoder()
    file = Path(path).expanduser()
    if not file.is_file():
        raise DataError(f"video: {file}: no such file")
    reader = open_video(file)
    count = reader.frame_count if not frames else min(frames, reader.frame_count)
    if count <= 0:
        raise DataError(f"video: {file}: no frames")
    sizes = np.tile(np.asarray(reader.size_hw, np.int32), (count, 1))
    return FileIndex("video", str(file), (), np.zeros(count, np.int64), (), sizes)


def split(index: FileIndex, test_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """(train items, test items): every k-th file of each class is held out (none for video or a flat
    folder, which have no labels to test against)."""
    items = np.arange(len(index))
    if not index.labelled or test_fraction <= 0:
        return items, items[:0]
    every = max(2, round(1.0 / test_fraction))
    test = np.zeros(len(index), bool)
    for label in range(len(index.classes)):
        members = items[index.labels == label]
        test[members[every - 1::every]] = True
    return items[~test], items[test]


def epoch_order(items: np.ndarray, seed: int, epoch: int, shuffle_buffer: int = 0,
                shuffle: bool = True) -> np.ndarray:
    """The items of one epoch in the order every framework reads them.

    ``shuffle_buffer = 0``: one seeded permutation of the whole epoch; ``N``: the items stay in
    blocks of N consecutive ones, shuffled within each block (for streaming sources such as a video,
    where reading far apart is expensive). The same (seed, epoch) gives the same order everywhere.
    """
    if not shuffle:
        return items.copy()
    rng = np.random.default_rng([seed, epoch])
    if not shuffle_buffer or shuffle_buffer >= len(items):
        return items[rng.permutation(len(items))]
    blocks = [items[lo:lo + shuffle_buffer] for lo in range(0, len(items), shuffle_buffer)]
    return np.concatenate([block[rng.permutation(len(block))] for block in blocks])


def check_sizes(index: FileIndex, image_hw: tuple[int, int], resize: bool) -> None:
    """Without a resize, every item must already have the model's input size."""
    if resize:
        return
    wrong = np.nonzero((index.sizes != np.asarray(image_hw)).any(axis=1))[0]
    if len(wrong):
        item = int(wrong[0])
        height, width = index.sizes[item]
        raise DataError(f"{index.source_name(item)}: {height}x{width} differs from image_size "
                        f"{image_hw[0]}x{image_hw[1]} and [data] resize = false (mixed sizes need a resize)")
