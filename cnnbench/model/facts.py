"""Framework-free facts about the models: names, default input shapes, constraints, sizes.

The networks themselves are written natively in each backend; this module says what they must
agree on, so that the spec can be checked before any framework is imported.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

ImageHW = tuple[int, int]  # (height, width) of a model's input, pixels


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
    # The ResNets pad every convolution explicitly (the same output sizes in every framework, odd
    # sides included) and end in global average pooling, so any height x width from the minimum up
    # works (image_multiple 1: 1080 is fine); smallcnn's dense layer
    # is sized from one side length, so it takes square inputs only.
    square_only: bool = False


MODELS: dict[str, ModelInfo] = {
    m.name: m
    for m in (
        ModelInfo("smallcnn", 28, 1, 10, 4, 4, False,
                  "2 x (3x3 conv + ReLU + 2x2 max-pool), dense 128 + ReLU, dense classes", square_only=True),
        ModelInfo("resnet18_cifar", 32, 3, 10, 8, 1, True,
                  "ResNet-18, 3x3 stem without max-pool (for 32x32), BasicBlocks [2, 2, 2, 2]"),
        ModelInfo("resnet50", 224, 3, 1000, 32, 1, True,
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


def image_hw(size: int | Sequence[int]) -> ImageHW:
    """(height, width) from an int (square) or a pair."""
    if isinstance(size, int):
        return size, size
    height, width = size
    return int(height), int(width)


def hw_text(size: int | Sequence[int]) -> str:
    """The CSV's form of an image size: "HxW" (e.g. "1080x1920")."""
    height, width = image_hw(size)
    return f"{height}x{width}"


def image_size_problem(model: str, size: int | Sequence[int]) -> str | None:
    """Why ``model`` cannot take inputs of this size (None when it can)."""
    info, (height, width) = MODELS[model], image_hw(size)
    if info.square_only and height != width:
        return (f"model {model} takes square images only (its dense layer is sized from one side), "
                f"found {height}x{width}")
    for name, side in (("height", height), ("width", width)):
        if side < info.min_image_size or side % info.image_multiple:
            return (f"model {model} needs a {name} >= {info.min_image_size} and a multiple of "
                    f"{info.image_multiple}, found {height}x{width}")
    return None


def smallcnn_dims(image_size: int | Sequence[int], channels: int, num_classes: int) -> dict[str, int]:
    """Layer widths of smallcnn: shared so that every backend builds the same network."""
    height, width = image_hw(image_size)
    if height != width:
        raise ValueError(f"smallcnn takes square images only, found {height}x{width}")
    return {
        "in_channels": channels,
        "conv1": 32,
        "conv2": 64,
        "flat": 64 * (height // 4) * (width // 4),
        "hidden": 128,
        "classes": num_classes,
    }


RESNET18_BLOCKS = (2, 2, 2, 2)
RESNET50_BLOCKS = (3, 4, 6, 3)
RESNET_WIDTHS = (64, 128, 256, 512)
BOTTLENECK_EXPANSION = 4
