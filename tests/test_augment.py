"""The augmentation's random draws: a pure function of (seed, epoch, index), with torchvision's ranges."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cnnbench.data.augment import crop_draws, reference_prepare, sample_points


def test_draws_depend_only_on_seed_epoch_and_index():
    indices = np.arange(200)
    whole = crop_draws(3, 1, indices, (375, 500), "random_resized_crop", (224, 224))
    order = np.random.default_rng(0).permutation(200)
    shuffled = crop_draws(3, 1, order, (375, 500), "random_resized_crop", (224, 224))
    np.testing.assert_array_equal(shuffled.boxes, whole.boxes[order])  # any order, any worker split
    np.testing.assert_array_equal(shuffled.flips, whole.flips[order])
    one = crop_draws(3, 1, [17], (375, 500), "random_resized_crop", (224, 224))
    np.testing.assert_array_equal(one.boxes[0], whole.boxes[17])
    for other in (crop_draws(4, 1, indices, (375, 500), "random_resized_crop", (224, 224)),
                  crop_draws(3, 2, indices, (375, 500), "random_resized_crop", (224, 224))):
        assert (other.boxes != whole.boxes).any(axis=1).mean() > 0.95  # another seed/epoch: other crops


def test_random_resized_crop_statistics():
    height, width = 375, 500
    draws = crop_draws(0, 0, np.arange(20000), (height, width), "random_resized_crop", (224, 224))
    y0, x0, h, w = draws.boxes.T
    assert draws.boxes.dtype == np.float32 and draws.flips.dtype == bool
    assert (y0 >= 0).all() and (x0 >= 0).all() and (y0 + h <= height).all() and (x0 + w <= width).all()
    np.testing.assert_array_equal(draws.boxes, np.round(draws.boxes))  # integer boxes, as torchvision's
    scale, ratio = h * w / (height * width), w / h
    # Rounding to whole pixels moves scale and ratio a little past the nominal bounds.
    assert 0.075 < scale.min() < 0.09 and scale.max() <= 1.0
    assert 0.74 < ratio.min() < 0.76 and 1.32 < ratio.max() < 1.345
    assert abs(draws.flips.mean() - 0.5) < 0.02
    # Uniform area fraction: a quarter of the tries below 0.08 + 0.23; more of the boxes, as big tries
    # that do not fit are redrawn.
    assert 0.25 < (scale < 0.31).mean() < 0.4
    # Uniform offsets: boxes are not all pinned to a corner.
    assert 0.4 < (y0 / np.maximum(height - h, 1)).mean() < 0.6


def test_random_resized_crop_fallback_for_extreme_aspect():
    # A 10x1000 strip: no try fits, so the centre crop clamped to ratio 4/3 (torchvision's fallback).
    draws = crop_draws(0, 0, np.arange(50), (10, 1000), "random_resized_crop", (224, 224))
    np.testing.assert_array_equal(draws.boxes, np.tile([[0, 493, 10, 13]], (50, 1)))


def test_pad_crop_center_and_none():
    draws = crop_draws(1, 0, np.arange(5000), (32, 32), "pad_crop", (32, 32))
    y0, x0, h, w = draws.boxes.T
    assert set(np.unique(y0)) == set(range(-4, 5)) and set(np.unique(x0)) == set(range(-4, 5))
    assert (h == 32).all() and (w == 32).all() and abs(draws.flips.mean() - 0.5) < 0.03
    counts = np.bincount((y0 + 4).astype(int))
    assert counts.min() > 0.8 * counts.mean()
    # Centre: torchvision's Resize(256) + CenterCrop(224) on 375x500 takes 328.125 source pixels square.
    center = crop_draws(0, 0, [0, 1], [(375, 500), (1080, 1920)], "center", (224, 224))
    np.testing.assert_allclose(center.boxes[0], [23.4375, 85.9375, 328.125, 328.125])
    np.testing.assert_allclose(center.boxes[1], [67.5, 487.5, 945, 945])
    assert not center.flips.any()
    whole = crop_draws(0, 0, [0, 1], (1080, 1920), "none", (1080, 1920))
    np.testing.assert_array_equal(whole.boxes, [[0, 0, 1080, 1920]] * 2)
    with pytest.raises(ValueError, match="kind"):
        crop_draws(0, 0, [0], (32, 32), "mixup", (32, 32))


def test_sampling_formula_and_reference():
    # An identity box samples pixel centres exactly; the flip mirrors the columns.
    ys, xs = sample_points(np.array([0, 0, 4, 6]), (4, 6), flip=False)
    np.testing.assert_array_equal(ys, np.arange(4)) and np.testing.assert_array_equal(xs, np.arange(6))
    assert list(sample_points(np.array([0, 0, 4, 6]), (4, 6), flip=True)[1]) == [5, 4, 3, 2, 1, 0]
    image = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(1, 2, 3, 3) * 10
    mean, std = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
    same = reference_prepare(image, np.array([[0, 0, 2, 3]]), np.array([False]), (2, 3), mean, std)
    np.testing.assert_allclose(same * 255, image.astype(float))
    # Shift by one row/column: the first row/column falls outside the image and is zero padding.
    shifted = reference_prepare(image, np.array([[-1, -1, 2, 3]]), np.array([False]), (2, 3), mean, std)
    np.testing.assert_allclose(shifted[0, 0], 0) and np.testing.assert_allclose(shifted[0, :, 0], 0)
    np.testing.assert_allclose(shifted[0, 1, 1:] * 255, image[0, 0, :2].astype(float))
    # Half-way between two pixels: their mean; at the edge of a magnified box: the edge pixel.
    half = reference_prepare(image, np.array([[0, 0.5, 2, 2]]), np.array([False]), (2, 2), mean, std)
    np.testing.assert_allclose(half[0, 0, 0] * 255, (image[0, 0, 0] + image[0, 0, 1]) / 2.0)
    zoom = reference_prepare(image, np.array([[0, 0, 1, 1]]), np.array([False]), (4, 4), mean, std)
    np.testing.assert_allclose(zoom[0, :2, :2] * 255, np.broadcast_to(image[0, 0, 0].astype(float), (2, 2, 3)))
    np.testing.assert_allclose(zoom[0, 0, 2] * 255, 0.875 * image[0, 0, 0] + 0.125 * image[0, 0, 1])
    assert math.isclose(float(reference_prepare(image, np.array([[0, 0, 2, 3]]), np.array([False]), (2, 3),
                                                (0.5, 0.5, 0.5), (0.25, 0.25, 0.25))[0, 0, 0, 0]), -2.0)
