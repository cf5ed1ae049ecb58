"""`cnnbench parity`: the models agree across all three frameworks, and a real mismatch is caught."""

from __future__ import annotations

from cnnbench.parity.check import format_checks, run_parity

BACKENDS = ["torch", "tensorflow", "jax"]


def test_parity_across_all_backends():
    checks = run_parity(["smallcnn", "resnet18_cifar", "resnet50"], BACKENDS)
    failed = [c for c in checks if not c.ok]
    assert not failed, format_checks(failed)
    # every pair of backends was compared for every model
    pairs = {(c.model, c.pair) for c in checks if c.pair != "layout"}
    assert len(pairs) == 3 * 3


def test_parity_at_a_non_square_size():
    """Height != width: the same logits and step in all three frameworks (global pooling adapts)."""
    checks = run_parity(["resnet18_cifar"], BACKENDS, image_size=(16, 36))  # 36 -> 18 -> 9 -> 5: odd sides
    failed = [c for c in checks if not c.ok]
    assert not failed, format_checks(failed)
    assert len({c.pair for c in checks if c.pair != "layout"}) == 3


def test_a_perturbed_weight_fails_parity():
    checks = run_parity(["smallcnn"], ["torch", "jax"], perturb=("jax", "conv2.weight"))
    failed = {c.what for c in checks if not c.ok}
    assert "forward rel L2" in failed and "weights after step rel L2" in failed


def test_keras_engines_agree_with_native_pytorch():
    """The one Keras model on the JAX, PyTorch and TensorFlow engines computes PyTorch's step."""
    checks = run_parity(["smallcnn"], ["torch", "keras"])
    failed = [c for c in checks if not c.ok]
    assert not failed, format_checks(failed)
    pairs = {c.pair for c in checks if c.pair != "layout"}
    assert "torch vs keras-torch" in pairs and "keras-jax vs keras-tensorflow" in pairs and len(pairs) == 6
