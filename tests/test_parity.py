"""`cnnbench parity`: the models agree across all three frameworks, and a real mismatch is caught."""

from __future__ import annotations

from cnnbench.parity.check import Check, format_checks, format_params, run_parity

BACKENDS = ["torch", "tensorflow", "jax"]


def test_parity_across_all_backends():
    result = run_parity(["smallcnn", "resnet18_cifar", "resnet50"], BACKENDS)
    checks, failed = result.checks, result.failed
    assert not failed, format_checks(failed)
    # every pair of backends was compared for every model
    pairs = {(c.model, c.pair) for c in checks if c.pair != "layout"}
    assert len(pairs) == 3 * 3
    assert result.params["resnet50"] == {name: 25_557_032 for name in BACKENDS}
    assert "resnet50: 25,557,032 in torch, tensorflow, jax" in format_params(result.params)


def test_parity_at_a_non_square_size():
    """Height != width: the same logits and step in all three frameworks (global pooling adapts)."""
    checks = run_parity(["resnet18_cifar"], BACKENDS, image_size=(16, 36)).checks  # 36 -> 18 -> 9 -> 5: odd sides
    failed = [c for c in checks if not c.ok]
    assert not failed, format_checks(failed)
    assert len({c.pair for c in checks if c.pair != "layout"}) == 3


def test_a_perturbed_weight_fails_parity():
    result = run_parity(["smallcnn"], ["torch", "jax"], perturb=("jax", "conv2.weight"))
    failed = {c.what for c in result.failed}
    assert "forward rel L2" in failed and "weights after step rel L2" in failed
    # the counts themselves are shown, and count checks as integers (float checks as before)
    assert format_params(result.params) == "smallcnn: 53,002 in torch, jax (8x8x1, 10 classes)"
    table = format_checks(result.checks)
    assert "| smallcnn | torch vs jax | params difference | 0 | 0 | yes |" in table
    assert "| smallcnn | torch vs jax | layers with other shapes | 0 | 0 | yes |" in table
    assert "| smallcnn | layout | layout params - reference | 0 | 0 | yes |" in table
    assert "0.00e+00" not in table and "| forward rel L2 |" in table and "e-0" in table


def test_differing_counts_are_grouped_and_shown_whole():
    counts = {"smallcnn": {"torch": 53_002, "tensorflow": 53_012, "jax": 53_002}}
    assert format_params(counts) == "smallcnn: 53,002 in torch, jax; 53,012 in tensorflow (8x8x1, 10 classes)"
    check = Check("smallcnn", "torch vs tensorflow", "params difference", 10, 0, integer=True)
    assert not check.ok and "| params difference | 10 | 0 | NO |" in format_checks([check])


def test_keras_engines_agree_with_native_pytorch():
    """The one Keras model on the JAX, PyTorch and TensorFlow engines computes PyTorch's step."""
    checks = run_parity(["smallcnn"], ["torch", "keras"]).checks
    failed = [c for c in checks if not c.ok]
    assert not failed, format_checks(failed)
    pairs = {c.pair for c in checks if c.pair != "layout"}
    assert "torch vs keras-torch" in pairs and "keras-jax vs keras-tensorflow" in pairs and len(pairs) == 6
