"""The framework-neutral weight layout: ordered names and shapes, computed without a framework.

Names and orientations are PyTorch's (``layer1.0.conv1.weight``; conv kernels OIHW, dense
matrices (out, in), smallcnn's flattened features in (C, H, W) order, BN as weight / bias /
running_mean / running_var). Every backend converts to and from this layout in one place, and
lists its weights in this order.
"""

from __future__ import annotations

from collections.abc import Sequence

from cnnbench.model.facts import (
    BOTTLENECK_EXPANSION,
    RESNET18_BLOCKS,
    RESNET50_BLOCKS,
    RESNET_WIDTHS,
    image_hw,
    smallcnn_dims,
)

Shape = tuple[int, ...]
BN_SUFFIXES = ("weight", "bias", "running_mean", "running_var")


def _bn(name: str, channels: int) -> list[tuple[str, Shape]]:
    return [(f"{name}.{suffix}", (channels,)) for suffix in BN_SUFFIXES]


def _conv(name: str, cin: int, cout: int, k: int) -> list[tuple[str, Shape]]:
    return [(f"{name}.weight", (cout, cin, k, k))]


def neutral_layout(model: str, image_size: int | Sequence[int], channels: int,
                   num_classes: int) -> list[tuple[str, Shape]]:
    if model == "smallcnn":
        d = smallcnn_dims(image_size, channels, num_classes)
        return [("conv1.weight", (d["conv1"], channels, 3, 3)), ("conv1.bias", (d["conv1"],)),
                ("conv2.weight", (d["conv2"], d["conv1"], 3, 3)), ("conv2.bias", (d["conv2"],)),
                ("fc1.weight", (d["hidden"], d["flat"])), ("fc1.bias", (d["hidden"],)),
                ("fc2.weight", (num_classes, d["hidden"])), ("fc2.bias", (num_classes,))]
    bottleneck = model == "resnet50"
    blocks = RESNET50_BLOCKS if bottleneck else RESNET18_BLOCKS
    out = _conv("conv1", channels, 64, 7 if bottleneck else 3) + _bn("bn1", 64)
    cin = 64
    for stage, (count, width) in enumerate(zip(blocks, RESNET_WIDTHS), start=1):
        for index in range(count):
            prefix, stride = f"layer{stage}.{index}", 2 if stage > 1 and index == 0 else 1
            if bottleneck:
                cout = width * BOTTLENECK_EXPANSION
                out += _conv(f"{prefix}.conv1", cin, width, 1) + _bn(f"{prefix}.bn1", width)
                out += _conv(f"{prefix}.conv2", width, width, 3) + _bn(f"{prefix}.bn2", width)
                out += _conv(f"{prefix}.conv3", width, cout, 1) + _bn(f"{prefix}.bn3", cout)
            else:
                cout = width
                out += _conv(f"{prefix}.conv1", cin, width, 3) + _bn(f"{prefix}.bn1", width)
                out += _conv(f"{prefix}.conv2", width, width, 3) + _bn(f"{prefix}.bn2", width)
            if stride != 1 or cin != cout:
                out += _conv(f"{prefix}.downsample.0", cin, cout, 1) + _bn(f"{prefix}.downsample.1", cout)
            cin = cout
    return out + [("fc.weight", (num_classes, cin)), ("fc.bias", (num_classes,))]


def trainable_count(layout: list[tuple[str, Shape]]) -> int:
    """Parameters that are trained (BN running statistics are buffers, not parameters)."""
    total = 0
    for name, shape in layout:
        if not name.endswith(("running_mean", "running_var")):
            size = 1
            for dim in shape:
                size *= dim
            total += size
    return total


def group_by_layer(layout: list[tuple[str, Shape]]) -> dict[str, list[str]]:
    """Layer name -> its neutral tensor suffixes, in order (``layer1.0.bn1`` -> weight, bias, ...)."""
    layers: dict[str, list[str]] = {}
    for name, _ in layout:
        layer, suffix = name.rsplit(".", 1)
        layers.setdefault(layer, []).append(suffix)
    return layers


# -- channels-last frameworks (Keras, Flax): kernels HWIO, dense (in, out), flatten in (H, W, C) --

def hwio_to_neutral(value, flatten_hwc: tuple[int, int, int] | None = None):
    """A channels-last framework's tensor -> the neutral orientation."""
    if value.ndim == 4:  # conv kernel HWIO -> OIHW
        return value.transpose(3, 2, 0, 1)
    if value.ndim == 2:  # dense (in, out) -> (out, in)
        if flatten_hwc:  # rows of a dense layer after a flatten: (H, W, C) order -> (C, H, W)
            h, w, c = flatten_hwc
            value = value.reshape(h, w, c, -1).transpose(2, 0, 1, 3).reshape(h * w * c, -1)
        return value.T
    return value


def neutral_to_hwio(value, flatten_hwc: tuple[int, int, int] | None = None):
    """Inverse of :func:`hwio_to_neutral`."""
    if value.ndim == 4:
        return value.transpose(2, 3, 1, 0)
    if value.ndim == 2:
        value = value.T
        if flatten_hwc:
            h, w, c = flatten_hwc
            value = value.reshape(c, h, w, -1).transpose(1, 2, 0, 3).reshape(h * w * c, -1)
        return value
    return value


def flatten_shape(model: str, layer: str, image_size: int | Sequence[int]) -> tuple[int, int, int] | None:
    """(H, W, C) of the features a dense layer reads after a flatten (smallcnn's fc1), else None."""
    if model == "smallcnn" and layer == "fc1":
        height, width = image_hw(image_size)
        return (height // 4, width // 4, smallcnn_dims(image_size, 1, 1)["conv2"])
    return None
