"""Inference inputs (`[infer] input`): every input computes the same logits, and the uint8
conversion on the device equals the host's float32 normalisation.

Each framework runs in its own process (never two frameworks in one), on CPU: the model that
`cnnbench infer` builds takes one batch resident on the device, as float32 from pageable memory,
and as uint8 pixels normalised on the device (the ``uint8_pinned`` path without the pinning,
which needs a GPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from cnnbench.data.normalize import channel_scale_shift, normalize_uint8_nhwc
from tests.conftest import REPO

SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    from cnnbench.backend import load as load_backend
    from cnnbench.data.normalize import normalize_uint8_nhwc, synthetic_uint8_nhwc
    from cnnbench.runs import Variant
    from cnnbench.parity.probe import probe_run

    framework, channels = sys.argv[1], 3
    run = probe_run(framework, "infer", "smallcnn", image_size=8, channels=channels, num_classes=10,
                    global_batch=4)
    pixels = synthetic_uint8_nhwc(4, 8, channels, seed=3)
    images = normalize_uint8_nhwc(pixels)
    model = load_backend(framework).build_inference(run, Variant("x"))
    sources = ["resident", "float32_pageable"] + (["uint8_pageable"] if framework != "tensorflow" else [])
    logits = {s: model.fetch(model.infer(model.host_batch(pixels if s.startswith("uint8") else images, s)))
              for s in sources}
    device = {}
    if framework == "torch":
        import torch
        from backends.torch.infer import normalize_uint8
        device["float32"] = normalize_uint8(torch.from_numpy(pixels), model.scale, model.shift).numpy()
    if framework == "jax":
        from backends.jax.infer import normalize_uint8
        from cnnbench.data.normalize import channel_scale_shift
        device["float32"] = np.asarray(normalize_uint8(pixels, *channel_scale_shift(channels))).transpose(0, 3, 1, 2)
    print(json.dumps({"logits": {k: v.tolist() for k, v in logits.items()},
                      "normalised": {k: v.tolist() for k, v in device.items()}, "host": images.tolist()}))
""")


@pytest.mark.parametrize("framework", ["torch", "jax", "tensorflow"])
def test_every_input_gives_the_same_logits(framework):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, "-c", SCRIPT, framework], capture_output=True, text=True,
                          timeout=300, cwd=REPO, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    logits = {k: np.asarray(v) for k, v in result["logits"].items()}
    reference = logits["float32_pageable"]
    assert reference.shape == (4, 10) and np.ptp(reference) > 1e-3  # real logits, not constants
    for source, values in logits.items():
        np.testing.assert_allclose(values, reference, rtol=1e-5, atol=1e-5, err_msg=source)
    # The device's uint8 conversion is the host's, to float32 rounding.
    for values in result["normalised"].values():
        np.testing.assert_allclose(np.asarray(values), np.asarray(result["host"]), rtol=1e-6, atol=1e-6)
    assert framework == "tensorflow" or result["normalised"]


def test_host_normalisation_maps_the_pixel_range_to_the_channel_statistics():
    pixels = np.array([[[[0, 0, 0], [255, 255, 255]]]], np.uint8)  # (1, 1, 2, 3): black and white
    out = normalize_uint8_nhwc(pixels)
    assert out.shape == (1, 3, 1, 2) and out.dtype == np.float32
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    np.testing.assert_allclose(out[0, :, 0, 0], -mean / std, rtol=1e-6)
    np.testing.assert_allclose(out[0, :, 0, 1], (1 - mean) / std, rtol=1e-6)
    scale, shift = channel_scale_shift(1)
    assert scale.shape == shift.shape == (1,)


PLAN_SPEC = """
name = "inputs"
model = "smallcnn"
dataset = "synthetic"
image_size = 8
channels = 1
num_classes = 10
backends = ["torch", "jax", "tensorflow"]
[infer]
batch_sizes = [1, 4]
input = ["resident", "uint8_pinned", "float32_pinned", "float32_pageable"]
"""


@pytest.mark.parametrize("device_kind", ["gpu", "cpu"], ids=["planned-for-a-gpu", "planned-for-a-cpu"])
def test_plan_runs_every_input_a_backend_can_start_from_and_says_why_not_the_others(device_kind):
    from cnnbench.infer.plan import expand_infer
    from cnnbench.spec import parse_spec_text

    runs, skipped = expand_infer(parse_spec_text(PLAN_SPEC, "inputs.toml"), device_kind=device_kind)
    planned = {run.backend: [(job.variant.name, job.batch) for job in run.jobs] for run in runs}
    reasons = {(run.backend, variant.name): why for run, variant, why in skipped}
    pinned = ("uint8_pinned", "float32_pinned")
    for backend in ("torch", "jax", "tensorflow"):
        runnable = [s for s in ("resident", "uint8_pinned", "float32_pinned", "float32_pageable")
                    if device_kind == "gpu" and backend != "tensorflow" or s not in pinned]
        assert planned[backend] == [(s, b) for s in runnable for b in (1, 4)]
        for source in set(pinned) - set(runnable):
            assert reasons[(backend, source)], (backend, source)
    if device_kind == "cpu":
        assert "on CPU there is no copy" in reasons[("torch", "uint8_pinned")]
    else:
        assert set(reasons) == {("tensorflow", s) for s in pinned}
        assert "no pinned-memory option" in reasons[("tensorflow", "uint8_pinned")]
