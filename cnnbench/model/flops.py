"""Analytical FLOPs of the models, from their layer shapes; peak rates for MFU.

Counted: multiply-adds of convolutions and dense layers (x2 = FLOPs), forward pass. Batch norm,
ReLU, pooling and residual additions are left out, as is customary (they are memory-bound and add
well under 1%). Training is taken as 3x forward (backward = 2x forward).
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

TRAIN_FLOPS_PER_FORWARD = 3.0

# Dense peak TFLOP/s by device-name fragment: (bf16/fp16 tensor core, fp32). Vendor datasheets,
# SXM parts; fp32 is plain FP32, not TF32. Override with `--peak-tflops`.
PEAK_TFLOPS: dict[str, tuple[float, float]] = {
    "H200": (989.0, 67.0),
    "H100": (989.0, 67.0),
    "A100": (312.0, 19.5),
    "L40S": (362.0, 91.6),
    "L4": (121.0, 30.3),
    "V100": (125.0, 15.7),
}


def _conv(size: tuple[int, int], cin: int, cout: int, k: int, stride: int) -> tuple[int, tuple[int, int]]:
    """(multiply-adds, output (H, W)) of a padded conv ('same'-style: out = ceil(side / stride))."""
    out = ((size[0] + stride - 1) // stride, (size[1] + stride - 1) // stride)
    return out[0] * out[1] * cout * k * k * cin, out


def forward_macs(model: str, image_size: int | Sequence[int], channels: int, num_classes: int) -> int:
    """Forward multiply-adds of one image of ``image_size`` (an int: square; or (H, W))."""
    hw = image_hw(image_size)
    if model == "smallcnn":
        d = smallcnn_dims(hw, channels, num_classes)
        m1, _ = _conv(hw, channels, d["conv1"], 3, 1)
        m2, _ = _conv((hw[0] // 2, hw[1] // 2), d["conv1"], d["conv2"], 3, 1)
        return m1 + m2 + d["flat"] * d["hidden"] + d["hidden"] * num_classes
    if model == "resnet18_cifar":
        macs, size = _conv(hw, channels, 64, 3, 1)
        cin = 64
        for stage, (blocks, width) in enumerate(zip(RESNET18_BLOCKS, RESNET_WIDTHS)):
            for block in range(blocks):
                stride = 2 if stage > 0 and block == 0 else 1
                m, out = _conv(size, cin, width, 3, stride)
                macs += m + _conv(out, width, width, 3, 1)[0]
                if stride != 1 or cin != width:
                    macs += _conv(size, cin, width, 1, stride)[0]
                size, cin = out, width
        return macs + cin * num_classes
    if model == "resnet50":
        macs, size = _conv(hw, channels, 64, 7, 2)
        size = ((size[0] + 1) // 2, (size[1] + 1) // 2)  # 3x3/2 max-pool
        cin = 64
        for stage, (blocks, width) in enumerate(zip(RESNET50_BLOCKS, RESNET_WIDTHS)):
            for block in range(blocks):
                stride = 2 if stage > 0 and block == 0 else 1
                cout = width * BOTTLENECK_EXPANSION
                macs += _conv(size, cin, width, 1, 1)[0]
                m, out = _conv(size, width, width, 3, stride)
                macs += m + _conv(out, width, cout, 1, 1)[0]
                if stride != 1 or cin != cout:
                    macs += _conv(size, cin, cout, 1, stride)[0]
                size, cin = out, cout
        return macs + cin * num_classes
    raise ValueError(f"unknown model {model!r}")


def gflops_per_image(model: str, image_size: int | Sequence[int], channels: int, num_classes: int) -> float:
    """Forward GFLOP per image (2 FLOPs per multiply-add)."""
    return 2 * forward_macs(model, image_size, channels, num_classes) / 1e9


def peak_tflops(device_name: str, precision: str) -> float | None:
    for fragment, (low, fp32) in PEAK_TFLOPS.items():
        if fragment.lower() in device_name.lower():
            return fp32 if precision == "fp32" else low
    return None


def mfu(gflops_fwd: float, images_per_sec: float, devices: int, peak: float | None,
        passes: float = TRAIN_FLOPS_PER_FORWARD) -> float | None:
    """Achieved FLOP/s over the devices' combined peak (training: 3 forward passes' worth per
    image; inference: passes=1); None when the peak is unknown."""
    if not peak or not images_per_sec:
        return None
    achieved = passes * gflops_fwd * 1e9 * images_per_sec
    return achieved / (peak * 1e12 * devices)
