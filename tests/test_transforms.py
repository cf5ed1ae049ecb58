"""THE cross-framework augmentation test: the same frames and draws through PyTorch's, JAX's and
TensorFlow's on-device ``prepare`` (each in its own process, eager and compiled) give the same batch,
and match the slow numpy reference of the sampling formula."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO
from transforms_probe import cases

from cnnbench.data.augment import reference_prepare
from cnnbench.data.normalize import IMAGENET_MEAN, IMAGENET_STD

FRAMEWORKS = ("torch", "jax", "tensorflow")
# float32 source coordinates differ by one ulp where a framework fuses a multiply-add (XLA does, eager
# PyTorch and TensorFlow do not); at a sharp edge that moves a pixel by up to ~1.5e-5 after
# normalisation (random noise is all edges: its mean difference is ~1e-6). Whole-pixel sampling agrees
# to float32 rounding (~3e-7).
EDGE_TOL, MEAN_TOL, EXACT_TOL = 3e-5, 3e-6, 1e-6
BF16_TOL = 2e-2  # bf16 keeps 8 bits: 2**-8 of |x| <= 2.7, and one rounding step between frameworks


def run_probe(framework: str, folder: Path, device: str = "cpu") -> dict[str, np.ndarray]:
    # Keep the caller's PYTHONPATH after the repo (the GPU machine carries extra wheels on it).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    if device == "cpu":
        env.update(JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="")
    path = folder / f"{framework}-{device}.npz"
    done = subprocess.run([sys.executable, "tests/transforms_probe.py", framework, str(path), device], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{framework} probe failed:\n{done.stderr[-3000:]}"
    with np.load(path) as saved:
        return {k: saved[k] for k in saved.files}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[str, dict[str, np.ndarray]]:
    folder = tmp_path_factory.mktemp("transforms")
    return {framework: run_probe(framework, folder) for framework in FRAMEWORKS}


def reference(case: dict) -> np.ndarray:
    images = case["images"]
    n, height, width = images.shape[:3]
    boxes = case["boxes"] if case["boxes"] is not None else np.tile([[0, 0, height, width]], (n, 1))
    flips = case["flips"] if case["flips"] is not None else np.zeros(n, dtype=bool)
    return reference_prepare(images, boxes, flips, case["out_hw"] or (height, width), IMAGENET_MEAN, IMAGENET_STD)


@pytest.mark.parametrize("name", list(cases()))
def test_prepare_agrees_across_frameworks_and_with_reference(outputs, name):
    case = cases()[name]
    expected = reference(case)
    torch_eager = outputs["torch"][f"out:{name}:eager"]
    for framework in FRAMEWORKS:
        np.testing.assert_array_equal(outputs[framework][f"in:{name}"], case["images"])  # same frames
        for mode in ("eager", "compiled"):
            key = f"{name}:{mode}"
            if f"out:{key}" not in outputs[framework]:
                continue
            got = outputs[framework][f"out:{key}"]
            assert got.shape == expected.shape, (framework, key)
            if case["dtype"] == "bf16":
                assert str(outputs[framework][f"dtype:{key}"]) == "bfloat16"
                assert np.abs(got - expected).max() < BF16_TOL, (framework, key)
                continue
            assert str(outputs[framework][f"dtype:{key}"]) == "float32"
            for other in (expected, torch_eager):
                diff = np.abs(got - other)
                whole_pixels = name in ("pad_crop", "identity", "center")  # no sharp sub-pixel sampling
                assert diff.max() < (EXACT_TOL if whole_pixels else EDGE_TOL), (framework, key, diff.max())
                assert diff.mean() < MEAN_TOL, (framework, key, diff.mean())


def test_pad_crop_pads_with_zero_pixels(outputs):
    # The zero padding is a black border (0 before normalisation), in every framework.
    case = cases()["pad_crop"]
    black = (0.0 - np.asarray(IMAGENET_MEAN)) / np.asarray(IMAGENET_STD)
    for k, (y0, _, _, _) in enumerate(case["boxes"]):
        out = outputs["jax"]["out:pad_crop:eager"][k]
        if y0 < 0:
            np.testing.assert_allclose(out[: int(-y0)], np.broadcast_to(black, out[: int(-y0)].shape), atol=1e-6)
        if y0 > 0:
            np.testing.assert_allclose(out[-int(y0):], np.broadcast_to(black, out[-int(y0):].shape), atol=1e-6)


def test_torch_grid_sample_is_the_same_sampling(outputs):
    # grid_sample (align_corners=False, border padding, masked outside) computes the formula too.
    for name, case in cases().items():
        if f"grid_sample:{name}" in outputs["torch"]:
            assert np.abs(outputs["torch"][f"grid_sample:{name}"] - reference(case)).max() < 1e-5, name


@pytest.mark.gpu
@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_prepare_on_gpu_matches_reference(tmp_path, framework):
    # The same cases with the batch on the GPU (TensorFlow is not installed on the GPU machine).
    found = run_probe(framework, tmp_path, "gpu")
    for name, case in cases().items():
        expected = reference(case)
        tol = BF16_TOL if case["dtype"] == "bf16" else EDGE_TOL
        for mode in ("eager", "compiled"):
            if f"out:{name}:{mode}" in found:
                assert np.abs(found[f"out:{name}:{mode}"] - expected).max() < tol, (name, mode)
