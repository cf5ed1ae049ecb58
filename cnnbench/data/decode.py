"""Image and video decoding to uint8 HWC RGB, with corrupt input named instead of decoded wrongly.

Images: JPEGs are decoded by simplejpeg (libjpeg-turbo's TurboJPEG API), the fastest decoder measured by
``benchmarks/decode_speed.py`` (see docs/real-input.md) and a 0.4 MiB wheel; where it is not installed, and for
PNG, other formats and CMYK JPEGs, by OpenCV's ``imdecode`` (libjpeg-turbo and libpng inside the
opencv-python-headless wheel). Both give the same pixels (libjpeg-turbo's default IDCT and upsampling;
the benchmark checks), straight to RGB; grey becomes three equal channels and alpha is dropped (as PIL's
``convert("RGB")`` in torchvision's ImageFolder loader); EXIF orientation is ignored (as PIL,
``tf.io.decode_jpeg`` and ``torchvision.io.decode_jpeg`` do), so every framework sees the same pixels.

OpenCV is lenient where a benchmark must not be: it returns ``None`` for some bad input and silently
decodes a truncated JPEG with a grey bottom. So the container is checked first: a JPEG must have its
end-of-image marker (FFD9) after its last start-of-scan (FFDA) -- entropy-coded data cannot contain
either marker, so a file cut anywhere inside its scan data fails, while trailing bytes after EOI (some
cameras append them) pass -- and a PNG must end with its IEND chunk.

Video: OpenCV's ``VideoCapture`` (the FFmpeg inside the same wheel). PyAV is the other maintained
choice, but its wheel (~35 MiB of FFmpeg) is not on the GPU machine and is too large to carry there,
while OpenCV is already on both machines and its FFmpeg reads .mp4 (H.264, MPEG-4) and .avi (MJPG).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from cnnbench.errors import DataError

JPEG_MAGIC = b"\xff\xd8\xff"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PNG_IEND = b"IEND\xaeB`\x82"  # the IEND chunk type and its fixed CRC
JPEG_SOS, JPEG_EOI = b"\xff\xda", b"\xff\xd9"
# Formats OpenCV also decodes, accepted without a container check (their decoders fail on truncation).
OTHER_MAGICS = {b"BM": "BMP", b"RIFF": "WebP", b"II*\x00": "TIFF", b"MM\x00*": "TIFF"}


def _cv2():
    import cv2

    return cv2


def _simplejpeg():
    """The simplejpeg module, or None where it is not installed (OpenCV decodes JPEGs then)."""
    try:
        import simplejpeg
    except ImportError:
        return None
    return simplejpeg


def jpeg_decoder() -> str:
    """Which library decodes JPEGs in this process: ``simplejpeg`` or ``opencv``."""
    return "simplejpeg" if _simplejpeg() is not None else "opencv"


def image_format(data: bytes) -> str | None:
    """The format named by the file's leading bytes (``JPEG``, ``PNG``, ...), None when none matches."""
    if data.startswith(JPEG_MAGIC):
        return "JPEG"
    if data.startswith(PNG_MAGIC):
        return "PNG"
    for magic, name in OTHER_MAGICS.items():
        if data.startswith(magic):
            return name
    return None


def _check_complete(data: bytes, fmt: str, source: str) -> None:
    if fmt == "JPEG":
        sos = data.rfind(JPEG_SOS)
        if sos < 0:
            # a file cut off inside its headers has no end either: that is truncation, not corruption
            if data.rfind(JPEG_EOI) < 0:
                raise DataError(f"{source}: truncated JPEG (ends before the image data, {len(data)} bytes)")
            raise DataError(f"{source}: corrupt JPEG (no start-of-scan marker)")
        if data.rfind(JPEG_EOI) < sos:
            raise DataError(f"{source}: truncated JPEG (no end-of-image marker after the image data, "
                            f"{len(data)} bytes)")
    elif fmt == "PNG" and not data.rstrip(b"\x00").endswith(PNG_IEND):
        raise DataError(f"{source}: truncated PNG (no IEND chunk at the end, {len(data)} bytes)")


def check_container(data: bytes, source: str) -> str:
    """The image format of ``data``; DataError naming ``source`` when it is empty, no image, or cut off."""
    if not data:
        raise DataError(f"{source}: empty file, not an image")
    fmt = image_format(data)
    if fmt is None:
        raise DataError(f"{source}: not an image (no JPEG/PNG/BMP/WebP/TIFF signature; starts with {data[:8]!r})")
    _check_complete(data, fmt, source)
    return fmt


def decode_image(data: bytes, source: str) -> np.ndarray:
    """Decode an encoded image to a uint8 (H, W, 3) RGB array; DataError naming ``source`` if it is bad."""
    fmt = check_container(data, source)
    simplejpeg = _simplejpeg() if fmt == "JPEG" else None
    if simplejpeg is not None:
        try:
            if simplejpeg.decode_jpeg_header(data)[2] in ("Gray", "YCbCr", "RGB"):  # not CMYK/YCCK
                return simplejpeg.decode_jpeg(data, colorspace="RGB")
        except ValueError as exc:  # strict: recoverable libjpeg errors too
            raise DataError(f"{source}: corrupt JPEG ({exc})") from None
    cv2 = _cv2()
    buffer = np.frombuffer(data, dtype=np.uint8)
    image = cv2.imdecode(buffer, cv2.IMREAD_COLOR_RGB | cv2.IMREAD_IGNORE_ORIENTATION)
    if image is None or image.ndim != 3 or image.shape[2] != 3 or image.size == 0:
        raise DataError(f"{source}: corrupt {fmt} (the decoder could not read it)")
    return image


def read_image(path: Path) -> np.ndarray:
    """Read and decode one image file (see ``decode_image``); DataError for a missing or bad file."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path}: no such image file") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return decode_image(data, str(path))


class VideoReader:
    """Frames of one video file as uint8 (H, W, 3) RGB arrays, by index or in order.

    Sequential reads decode forward; ``read(i)`` of any other frame seeks (OpenCV's FFmpeg backend seeks
    to the previous keyframe and decodes forward, so it returns frame i exactly, at a cost).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise DataError(f"{self.path}: no such video file")
        cv2 = _cv2()
        self._capture = cv2.VideoCapture(str(self.path), cv2.CAP_FFMPEG)
        if not self._capture.isOpened():
            self._capture.release()
            raise DataError(f"{self.path}: cannot open as a video (not a video file, or a codec FFmpeg lacks)")
        self.frame_count = int(self._capture.get(cv2.CAP_PROP_FRAME_COUNT))
        self.size_hw = (int(self._capture.get(cv2.CAP_PROP_FRAME_HEIGHT)),
                        int(self._capture.get(cv2.CAP_PROP_FRAME_WIDTH)))
        self.fps = float(self._capture.get(cv2.CAP_PROP_FPS))
        if self.frame_count <= 0 or min(self.size_hw) <= 0:
            self._capture.release()
            raise DataError(f"{self.path}: a video without frames (frame count {self.frame_count}, "
                            f"size {self.size_hw[0]}x{self.size_hw[1]})")
        self._next = 0  # index of the frame the next plain read returns

    def read(self, index: int) -> np.ndarray:
        """Frame ``index`` (0-based) as uint8 (H, W, 3) RGB."""
        if not 0 <= index < self.frame_count:
            raise IndexError(f"{self.path}: frame {index} outside 0..{self.frame_count - 1}")
        cv2 = _cv2()
        if index != self._next:
            self._capture.set(cv2.CAP_PROP_POS_FRAMES, index)
        ok, frame = self._capture.read()
        if not ok or frame is None:
            self._next = -1  # position unknown: seek next time
            raise DataError(f"{self.path}: frame {index} of {self.frame_count} cannot be decoded (truncated video?)")
        self._next = index + 1
        return cv2.cvtColor(frame, cv2.COLOR_BGR2RGB)

    def __len__(self) -> int:
        return self.frame_count

    def __iter__(self) -> Iterator[np.ndarray]:
        for index in range(self.frame_count):
            yield self.read(index)

    def close(self) -> None:
        self._capture.release()

    def __enter__(self) -> VideoReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_video(path: Path) -> VideoReader:
    """Open a video file for frame reading; DataError when it is missing or cannot be opened."""
    return VideoReader(path)
