"""Image and video decoding: formats, channel conversion, and every bad input named as a DataError."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from skimage import data as skdata

from cnnbench.data import decode
from cnnbench.data.decode import decode_image, open_video, read_image
from cnnbench.errors import DataError


@pytest.fixture(params=["simplejpeg", "opencv"])
def jpeg_decoder(request, monkeypatch) -> str:
    """Each image test runs with both JPEG paths (simplejpeg, and OpenCV where simplejpeg is missing)."""
    if request.param == "opencv":
        monkeypatch.setattr(decode, "_simplejpeg", lambda: None)
    assert decode.jpeg_decoder() == request.param
    return request.param


@pytest.fixture(scope="module")
def photo() -> np.ndarray:
    return np.ascontiguousarray(skdata.astronaut()[::4, ::4])  # 128x128 RGB, a real photograph


def encode(image: np.ndarray, ext: str, params: tuple[int, ...] = ()) -> bytes:
    if image.ndim == 3 and image.shape[2] == 3:
        image = image[:, :, ::-1]  # OpenCV encodes BGR
    elif image.ndim == 3 and image.shape[2] == 4:
        image = image[:, :, [2, 1, 0, 3]]
    ok, buf = cv2.imencode(ext, image, list(params))
    assert ok
    return buf.tobytes()


def test_jpeg_and_png_decode_to_rgb(photo, tmp_path, jpeg_decoder):
    png = decode_image(encode(photo, ".png"), "a.png")
    assert png.dtype == np.uint8 and png.shape == (128, 128, 3)
    np.testing.assert_array_equal(png, photo)  # lossless, and RGB not BGR
    jpeg = decode_image(encode(photo, ".jpg", (cv2.IMWRITE_JPEG_QUALITY, 95)), "a.jpg")
    assert jpeg.shape == (128, 128, 3)
    error = np.abs(jpeg.astype(int) - photo).mean()
    assert error < 6 and error < np.abs(jpeg[..., ::-1].astype(int) - photo).mean() / 3  # RGB, not BGR
    path = tmp_path / "b.jpg"
    path.write_bytes(encode(photo, ".jpg"))
    assert read_image(path).shape == (128, 128, 3)


def test_grey_and_rgba_become_three_channels(photo, jpeg_decoder):
    grey = photo.mean(axis=2).astype(np.uint8)
    for ext in (".png", ".jpg"):
        out = decode_image(encode(grey, ext), "g" + ext)
        assert out.shape == (128, 128, 3)
        assert (out[..., 0] == out[..., 1]).all() and (out[..., 1] == out[..., 2]).all()
    rgba = np.dstack([photo, np.full(photo.shape[:2], 9, np.uint8)])
    out = decode_image(encode(rgba, ".png"), "rgba.png")
    np.testing.assert_array_equal(out, photo)  # alpha dropped, as PIL's convert("RGB")


def test_bad_images_are_named(photo, tmp_path, jpeg_decoder):
    jpeg, png = encode(photo, ".jpg"), encode(photo, ".png")
    corrupt_png = bytearray(png)
    corrupt_png[len(png) // 2:len(png) // 2 + 16] = b"0123456789abcdef"  # chunk CRC no longer matches
    cases = {
        "empty.jpg": (b"", "empty file"),
        "text.jpg": (b"this is not an image at all", "not an image"),
        "cut.jpg": (jpeg[: len(jpeg) // 2], "truncated JPEG"),  # OpenCV alone decodes it with a grey bottom
        "cut2.jpg": (jpeg[:-2], "truncated JPEG"),
        "header.jpg": (jpeg[:200], "JPEG"),
        "cut.png": (png[: len(png) // 2], "truncated PNG"),
        "crc.png": (bytes(corrupt_png), "corrupt PNG"),
    }
    for name, (payload, what) in cases.items():
        path = tmp_path / name
        path.write_bytes(payload)
        with pytest.raises(DataError, match=what) as info:
            read_image(path)
        assert str(path) in str(info.value)
    with pytest.raises(DataError, match="no such image file"):
        read_image(tmp_path / "missing.jpg")
    # Bytes after the end-of-image marker (some cameras append them) are not truncation.
    assert decode_image(jpeg + b"\x00trailer", "tail.jpg").shape == (128, 128, 3)


def test_video_frames_and_bad_video(photo, tmp_path):
    path = tmp_path / "clip.avi"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 10, (128, 96))
    frames = [np.roll(photo[:96], 8 * k, axis=1) for k in range(6)]
    for frame in frames:
        writer.write(np.ascontiguousarray(frame[:, :, ::-1]))
    writer.release()
    with open_video(path) as video:
        assert video.frame_count == 6 and video.size_hw == (96, 128)
        decoded = list(video)
        assert len(decoded) == 6 and decoded[0].shape == (96, 128, 3)
        for frame, original in zip(decoded, frames):
            assert np.abs(frame.astype(int) - original).mean() < 8  # RGB order, lossy codec
        np.testing.assert_array_equal(video.read(3), decoded[3])  # a seek returns the same frame
        np.testing.assert_array_equal(video.read(1), decoded[1])
    (tmp_path / "fake.mp4").write_bytes(b"not a video")
    with pytest.raises(DataError, match="fake.mp4: cannot open"):
        open_video(tmp_path / "fake.mp4")
    with pytest.raises(DataError, match="no such video"):
        open_video(tmp_path / "missing.mp4")
