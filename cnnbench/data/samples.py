"""Sample data from real photographs that scikit-image ships (no download): a JPEG folder and a video.

``write_image_folder`` writes ``root/CLASS/NNNN.jpg``, one class per photograph, each file a different
random crop (half to all of the photograph's area, the output's aspect ratio) with a random flip and a
little brightness change, resized to the requested size (ImageNet-like 375x500, or 1080x1920 camera
frames). Light sensor-like noise is added after resizing, so that photographs enlarged to 1080p
compress and decode like camera frames, not like smooth gradients.

``write_video`` writes a short clip that pans and zooms across a photograph (every frame differs), as
.mp4 (MPEG-4 Part 2, OpenCV's 'mp4v', which the FFmpeg inside opencv-python-headless both writes and
reads) or .avi (Motion-JPEG); if the .mp4 writer cannot be opened, it falls back to .avi and says so in
the returned path.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from cnnbench.errors import DataError

# Colour photographs first; the greyscale ones after them are written as three equal channels.
COLOUR_PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "hubble_deep_field", "immunohistochemistry", "retina")
GREY_PHOTOS = ("camera", "coins", "moon", "brick", "grass", "gravel", "cell", "clock")
PHOTOS = COLOUR_PHOTOS + GREY_PHOTOS

JPEG_QUALITY = 90
NOISE_STD = 2.0  # in 0..255 units
VIDEO_CODECS = {".mp4": "mp4v", ".avi": "MJPG"}


def photo(name: str) -> np.ndarray:
    """One scikit-image photograph as uint8 (H, W, 3) RGB."""
    if name not in PHOTOS:
        raise DataError(f"sample photo {name!r} is not one of {', '.join(PHOTOS)}")
    from skimage import data as skdata

    image = np.asarray(getattr(skdata, name)())
    if image.ndim == 2:
        image = np.repeat(image[:, :, None], 3, axis=2)
    return np.ascontiguousarray(image[:, :, :3].astype(np.uint8))


def _class_names(classes: int | Sequence[str]) -> tuple[str, ...]:
    if isinstance(classes, int):
        if not 1 <= classes <= len(PHOTOS):
            raise DataError(f"samples: classes must be 1..{len(PHOTOS)} (one per shipped photograph), got {classes}")
        return PHOTOS[:classes]
    names = tuple(classes)
    unknown = [name for name in names if name not in PHOTOS]
    if unknown or not names:
        raise DataError(f"samples: classes must be names of shipped photographs ({', '.join(PHOTOS)}), "
                        f"got {', '.join(unknown) or 'none'}")
    return names


def random_view(image: np.ndarray, size_hw: tuple[int, int], rng: np.random.Generator,
                scale: tuple[float, float] = (0.5, 1.0)) -> np.ndarray:
    """A random crop of ``image`` with the aspect ratio of ``size_hw``, flipped at random, resized to it."""
    import cv2

    src_h, src_w = image.shape[:2]
    out_h, out_w = size_hw
    fit = min(src_h / out_h, src_w / out_w) * np.sqrt(rng.uniform(*scale))  # source pixels per output pixel
    crop_h, crop_w = max(1, round(out_h * fit)), max(1, round(out_w * fit))
    y0, x0 = rng.integers(0, src_h - crop_h + 1), rng.integers(0, src_w - crop_w + 1)
    crop = image[y0:y0 + crop_h, x0:x0 + crop_w]
    if rng.random() < 0.5:
        crop = crop[:, ::-1]
    shrinking = crop_h > out_h
    resized = cv2.resize(np.ascontiguousarray(crop), (out_w, out_h),
                         interpolation=cv2.INTER_AREA if shrinking else cv2.INTER_CUBIC)
    gain = rng.uniform(0.85, 1.15)
    noise = rng.standard_normal(resized.shape, dtype=np.float32) * NOISE_STD  # float32: half the work of float64
    return np.clip(resized * np.float32(gain) + noise, 0, 255).astype(np.uint8)


def _write_jpeg(path: Path, image: np.ndarray) -> None:
    import cv2

    ok, buffer = cv2.imencode(".jpg", image[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
    if not ok:
        raise DataError(f"{path}: OpenCV could not encode a JPEG")
    path.write_bytes(buffer.tobytes())


def _write_class(folder: Path, name: str, n_per_class: int, size_hw: tuple[int, int],
                 seed: np.random.SeedSequence) -> list[Path]:
    source = photo(name)
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(n_per_class):
        path = folder / f"{k:04d}.jpg"
        _write_jpeg(path, random_view(source, size_hw, rng))
        paths.append(path)
    return paths


def write_image_folder(root: Path, n_per_class: int, classes: int | Sequence[str], size_hw: tuple[int, int],
                       seed: int = 0) -> list[Path]:
    """Write ``root/CLASS/NNNN.jpg`` (``n_per_class`` each, all ``size_hw``); returns the files in order.

    Classes are written in parallel processes, each from its own seed spawned from ``seed``, so the
    files do not depend on the number of processes (thousands of 375x500 JPEGs took over 30 s serially).
    """
    if n_per_class < 1:
        raise DataError(f"samples: images per class must be at least 1, got {n_per_class}")
    size_hw = (int(size_hw[0]), int(size_hw[1]))
    if min(size_hw) < 1:
        raise DataError(f"samples: image size must be positive, got {size_hw[0]}x{size_hw[1]}")
    root = Path(root)
    names = _class_names(classes)
    seeds = np.random.SeedSequence(seed).spawn(len(names))
    jobs = [(root / name, name, n_per_class, size_hw, child) for name, child in zip(names, seeds)]
    processes = min(len(jobs), os.cpu_count() or 1)
    if processes == 1 or len(jobs) * n_per_class < 64:  # small folders (tests): no pool to start
        return [path for job in jobs for path in _write_class(*job)]
    # spawn, not fork: the caller may hold threads (a framework's) that a forked child would inherit locked.
    with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn")) as pool:
        return [path for written in pool.map(_write_class, *zip(*jobs)) for path in written]


def video_frames(frames: int, size_hw: tuple[int, int], name: str = "astronaut") -> Iterator[np.ndarray]:
    """``frames`` uint8 (H, W, 3) RGB frames panning and slowly zooming across a photograph."""
    import cv2

    source = photo(name)
    src_h, src_w = source.shape[:2]
    out_h, out_w = size_hw
    for f in range(frames):
        t = f / max(frames - 1, 1)
        fit = min(src_h / out_h, src_w / out_w) * (0.8 - 0.2 * t)  # zoom in as the clip goes on
        crop_h, crop_w = max(1, int(out_h * fit)), max(1, int(out_w * fit))
        y0 = int((src_h - crop_h) * (0.5 + 0.4 * np.sin(2 * np.pi * t)))
        x0 = int((src_w - crop_w) * t)
        crop = np.ascontiguousarray(source[y0:y0 + crop_h, x0:x0 + crop_w])
        yield cv2.resize(crop, (out_w, out_h), interpolation=cv2.INTER_LINEAR)


def write_video(path: Path, frames: int, size_hw: tuple[int, int], fps: float = 30.0) -> Path:
    """Write a ``frames``-frame clip of ``size_hw`` to ``path`` (.mp4 or .avi); returns the path written."""
    import cv2

    path = Path(path)
    if path.suffix.lower() not in VIDEO_CODECS:
        raise DataError(f"{path}: sample video must end in {' or '.join(VIDEO_CODECS)}")
    if frames < 1:
        raise DataError(f"samples: a video needs at least 1 frame, got {frames}")
    height, width = int(size_hw[0]), int(size_hw[1])
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*VIDEO_CODECS[path.suffix.lower()]), fps,
                             (width, height))
    if not writer.isOpened() and path.suffix.lower() == ".mp4":
        path = path.with_suffix(".avi")  # this OpenCV build cannot write MPEG-4: Motion-JPEG always works
        writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), fps, (width, height))
    if not writer.isOpened():
        raise DataError(f"{path}: OpenCV cannot write this video (codec {VIDEO_CODECS[path.suffix.lower()]})")
    try:
        for frame in video_frames(frames, (height, width)):
            writer.write(np.ascontiguousarray(frame[:, :, ::-1]))
    finally:
        writer.release()
    return path
