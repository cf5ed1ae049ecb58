"""cnnbench.infer.images: request bodies become images of the model's (H, W), square or not."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from cnnbench.infer.images import BadInput, decode_image


def _jpeg(height: int, width: int) -> bytes:
    image = np.random.default_rng(0).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return cv2.imencode(".jpg", image)[1].tobytes()


@pytest.mark.parametrize("size_hw", [(32, 32), (24, 40), (40, 24)])
def test_a_jpeg_body_is_resized_to_the_models_height_and_width(size_hw):
    out = decode_image(_jpeg(50, 70), size_hw, 3)
    assert out.shape == (*size_hw, 3) and out.dtype == np.uint8


def test_a_grey_model_gets_one_channel_and_a_truncated_body_is_refused():
    assert decode_image(_jpeg(30, 30), (16, 20), 1).shape == (16, 20, 1)
    body = _jpeg(30, 30)
    with pytest.raises(BadInput, match="truncated"):
        decode_image(body[: len(body) // 2], (16, 20), 3)
