"""The same CNN in every framework: exact parameter counts and the same ordered weight layout."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO

from cnnbench.model import flops
from cnnbench.model.facts import REFERENCE_PARAMS
from cnnbench.model.layout import neutral_layout, trainable_count
from cnnbench.model.pipeline import pipeline_pieces, pipeline_unsupported, split_points
from cnnbench.parity.probe import probe_run


def _shapes(backend: str) -> dict:
    done = subprocess.run([sys.executable, "tests/framework_shapes.py", backend], cwd=REPO,
                          capture_output=True, text=True, timeout=600, env={"PYTHONPATH": str(REPO),
                                                                            "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# keras-tensorflow is the "tensorflow" entry: the same Keras models on the same engine.
@pytest.mark.parametrize("backend", ["torch", "tensorflow", "jax", "keras-jax", "keras-torch"])
def test_param_counts_and_layout(backend):
    found = _shapes(backend)
    for (model, size, channels, classes), expected in REFERENCE_PARAMS.items():
        entry = found[f"{model}/{size}/{channels}/{classes}"]
        assert entry["params"] == expected, (backend, model)
        layout = [[name, list(shape)] for name, shape in neutral_layout(model, size, channels, classes)]
        assert entry["layout"] == layout, (backend, model)
    # built natively at height != width too: the same parameters and layout
    non_square = found["resnet50/(64,96)/3/1000"]
    assert non_square["params"] == REFERENCE_PARAMS[("resnet50", 224, 3, 1000)], backend
    assert non_square["layout"] == found["resnet50/224/3/1000"]["layout"], backend


def test_flops_scale_with_height_times_width_and_smallcnn_refuses_non_square():
    from cnnbench.model.facts import image_size_problem

    square = flops.forward_macs("resnet50", 1088, 3, 1000)
    frame = flops.forward_macs("resnet50", (1088, 1920), 3, 1000)
    # every layer's output is (H/s) x (W/s): the count grows with the area (bar the dense layer)
    assert frame / square == pytest.approx(1920 / 1088, rel=1e-3)
    assert image_size_problem("resnet50", (1080, 1920)) is None
    assert "square images only" in image_size_problem("smallcnn", (8, 16))
    assert "height >= 32" in image_size_problem("resnet50", (16, 64))


def test_layout_counts_match_reference():
    for (model, size, channels, classes), expected in REFERENCE_PARAMS.items():
        assert trainable_count(neutral_layout(model, size, channels, classes)) == expected


def test_resnet50_flops_match_the_published_figure():
    # torchvision's ResNet-50 at 224x224: 4.09 G multiply-adds.
    assert flops.forward_macs("resnet50", 224, 3, 1000) / 1e9 == pytest.approx(4.09, abs=0.02)
    assert flops.gflops_per_image("resnet18_cifar", 32, 3, 10) == pytest.approx(2 * 0.556, rel=0.02)


def test_pipeline_stages_are_contiguous_even_runs_of_pieces_and_too_many_are_refused():
    assert split_points(pipeline_pieces("smallcnn"), 2) == [(0, 2), (2, 3)]
    assert split_points(pipeline_pieces("resnet50"), 4) == [(0, 4), (4, 9), (9, 14), (14, 18)]
    too_many = probe_run("jax", "pipeline", "smallcnn", devices=4, image_size=8, channels=1, num_classes=10,
                         global_batch=8)
    refusal = pipeline_unsupported(too_many.model, too_many.devices, too_many.hosts, too_many.global_batch,
                                   too_many.microbatches)
    assert refusal == "4 pipeline stages, but smallcnn splits into 3 pieces (stem, blocks, head)"
    fits = probe_run("torch", "pipeline", "smallcnn", devices=2, image_size=8, channels=1, num_classes=10,
                     global_batch=8, microbatches=4)
    assert pipeline_unsupported(fits.model, fits.devices, fits.hosts, fits.global_batch, fits.microbatches) is None
