"""Sample data from scikit-image's photographs: JPEG folders and videos that read back as written."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import run_cli

from cnnbench.data.decode import open_video, read_image
from cnnbench.data.samples import PHOTOS, write_image_folder, write_video
from cnnbench.errors import DataError


def test_image_folder_sizes_classes_and_variety(tmp_path):
    paths = write_image_folder(tmp_path / "a", 3, 2, (45, 60), seed=1)
    assert [p.relative_to(tmp_path / "a").as_posix() for p in paths] == [
        f"{name}/{k:04d}.jpg" for name in PHOTOS[:2] for k in range(3)]
    images = [read_image(p) for p in paths]
    assert all(image.shape == (45, 60, 3) for image in images)
    for k in range(1, 3):  # files of one class differ (other crops/flips)
        assert np.abs(images[0].astype(int) - images[k]).mean() > 5
    again = write_image_folder(tmp_path / "b", 3, 2, (45, 60), seed=1)
    assert [p.read_bytes() for p in again] == [p.read_bytes() for p in paths]  # seeded: reproducible
    big = write_image_folder(tmp_path / "c", 1, ["retina"], (1080, 1920), seed=0)
    assert read_image(big[0]).shape == (1080, 1920, 3)
    with pytest.raises(DataError, match="classes"):
        write_image_folder(tmp_path / "d", 1, ["no-such-photo"], (8, 8))


@pytest.mark.parametrize("suffix", [".mp4", ".avi"])
def test_video_reads_back(tmp_path, suffix):
    path = write_video(tmp_path / f"clip{suffix}", 12, (72, 128), fps=24)
    assert path.suffix == suffix  # this OpenCV writes both
    with open_video(path) as video:
        assert video.frame_count == 12 and video.size_hw == (72, 128)
        frames = list(video)
    assert len(frames) == 12 and frames[0].shape == (72, 128, 3)
    assert np.abs(frames[0].astype(int) - frames[-1]).mean() > 5  # the clip moves


def test_samples_command(tmp_path):
    done = run_cli("samples", tmp_path, "--size", "30", "40", "--per-class", "2", "--classes", "3",
                   "--video-frames", "4", timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(list((tmp_path / "images").glob("*/*.jpg"))) == 6
    with open_video(tmp_path / "video.mp4") as video:
        assert video.frame_count == 4 and video.size_hw == (30, 40)
    bad = run_cli("samples", tmp_path, "--classes", "99", timeout=120)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "classes" in bad.stderr
