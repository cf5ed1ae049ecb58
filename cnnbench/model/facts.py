"""Framework-free facts about the models: names, default input shapes, constraints, sizes.

The networks themselves are written natively in each backend; this module says what they must
agree on, so that the spec can be checked before any framework is imported.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelInfo:
    name: str
    default_image_size: int
    default_channels: int
    default_classes: int
    min_image_size: int
    image_multiple: int  # the image size must be a multiple of this
    has_batchnorm: bool
    summary: str


MODELS: dict[str, ModelInfo] = {
    m.name: m
    for m in (
        ModelInfo("smallcnn", 28, 1, 10, 4, 4, False,
                  "2 x (3x3 conv + ReLU + 2x2 max-pool), dense 128 + ReLU, dense classes"),
        ModelInfo("resnet18_cifar", 32, 3, 10, 8, 8, True,
                  "ResNet-18, 3x3 stem without max-pool (for 32x32), BasicBlocks [2, 2, 2, 2]"),
        ModelInfo("resnet50", 224, 3, 1000, 32, 32, True,
                  "ResNet-50 v1.5 in torchvision's layout: 7x7 stem, max-pool, Bottlenecks [3, 4, 6, 3]"),
    )
}

# Parameter counts every backend must reproduce exactly (tests check all three frameworks).
REFERENCE_PARAMS = {
    ("smallcnn", 8, 1, 10): 53_002,
    ("resnet18_cifar", 32, 3, 10): 11_173_962,
    ("resnet50", 224, 3, 1000): 25_557_032,
}

# Batch-norm settings shared by all backends (PyTorch's convention: the new statistic's weight).
BN_MOMENTUM = 0.1
BN_EPSILON = 1e-5


def smallcnn_dims(image_size: int, channels: int, num_classes: int) -> dict[str, int]:
    """Layer widths of smallcnn: shared so that every backend builds the same network."""
    return {
        "in_channels": channels,
        "conv1": 32,
        "conv2": 64,
        "flat": 64 * (image_size // 4) ** 2,
        "hidden": 128,
        "classes": num_classes,
    }


RESNET18_BLOCKS = (2, 2, 2, 2)
RESNET50_BLOCKS = (3, 4, 6, 3)
RESNET_WIDTHS = (64, 128, 256, 512)
BOTTLENECK_EXPANSION = 4
