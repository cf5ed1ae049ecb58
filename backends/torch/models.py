"""The three networks in PyTorch, in torchvision's layout and naming.

Parameter names (``layer1.0.conv1.weight`` ...) are the framework-neutral weight names every
backend maps to; OIHW kernels and (out, in) dense matrices are the neutral orientation.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from cnnbench.model.facts import (
    BN_EPSILON,
    BN_MOMENTUM,
    BOTTLENECK_EXPANSION,
    RESNET18_BLOCKS,
    RESNET50_BLOCKS,
    RESNET_WIDTHS,
    smallcnn_dims,
)


def _bn(channels: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, eps=BN_EPSILON, momentum=BN_MOMENTUM)


class SmallCNN(nn.Module):
    def __init__(self, image_size: int | tuple[int, int], channels: int, num_classes: int) -> None:
        super().__init__()
        d = smallcnn_dims(image_size, channels, num_classes)
        self.conv1 = nn.Conv2d(channels, d["conv1"], 3, padding=1)
        self.conv2 = nn.Conv2d(d["conv1"], d["conv2"], 3, padding=1)
        self.fc1 = nn.Linear(d["flat"], d["hidden"])
        self.fc2 = nn.Linear(d["hidden"], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = nn.functional.max_pool2d(torch.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)  # (C, H, W) order: the neutral order of fc1's inputs
        return self.fc2(torch.relu(self.fc1(x)))


class BasicBlock(nn.Module):
    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, width, 3, stride, 1, bias=False)
        self.bn1 = _bn(width)
        self.conv2 = nn.Conv2d(width, width, 3, 1, 1, bias=False)
        self.bn2 = _bn(width)
        self.downsample = None
        if stride != 1 or cin != width:
            self.downsample = nn.Sequential(nn.Conv2d(cin, width, 1, stride, bias=False), _bn(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + shortcut)


class Bottleneck(nn.Module):
    """ResNet v1.5: the stride sits on the 3x3 convolution, as in torchvision."""

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * BOTTLENECK_EXPANSION
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = _bn(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = _bn(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = _bn(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), _bn(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        out = torch.relu(self.bn1(self.conv1(x)))
        out = torch.relu(self.bn2(self.conv2(out)))
        return torch.relu(self.bn3(self.conv3(out)) + shortcut)


class ResNet(nn.Module):
    def __init__(self, block: type, blocks: tuple[int, ...], channels: int, num_classes: int,
                 imagenet_stem: bool) -> None:
        super().__init__()
        if imagenet_stem:
            self.conv1 = nn.Conv2d(channels, 64, 7, 2, 3, bias=False)
            self.maxpool: nn.Module = nn.MaxPool2d(3, 2, 1)
        else:
            self.conv1 = nn.Conv2d(channels, 64, 3, 1, 1, bias=False)
            self.maxpool = nn.Identity()
        self.bn1 = _bn(64)
        expansion = BOTTLENECK_EXPANSION if block is Bottleneck else 1
        cin = 64
        for stage, (count, width) in enumerate(zip(blocks, RESNET_WIDTHS), start=1):
            layers = []
            for index in range(count):
                stride = 2 if stage > 1 and index == 0 else 1
                layers.append(block(cin, width, stride))
                cin = width * expansion
            setattr(self, f"layer{stage}", nn.Sequential(*layers))
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(torch.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def init_weights(model: nn.Module) -> None:
    """The initialisation of docs/protocol.md: He-normal fan-out convs, zero biases, BN gamma=1/beta=0,
    dense U(+-1/sqrt(fan_in)) with zero bias (identical scheme in every backend)."""
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(module, nn.BatchNorm2d):
            nn.init.ones_(module.weight)
        elif isinstance(module, nn.Linear):
            bound = 1.0 / math.sqrt(module.in_features)
            nn.init.uniform_(module.weight, -bound, bound)
        if isinstance(module, (nn.Conv2d, nn.BatchNorm2d, nn.Linear)) and module.bias is not None:
            nn.init.zeros_(module.bias)


def build_model(name: str, image_size: int | tuple[int, int], channels: int, num_classes: int) -> nn.Module:
    if name == "smallcnn":
        model: nn.Module = SmallCNN(image_size, channels, num_classes)
    elif name == "resnet18_cifar":
        model = ResNet(BasicBlock, RESNET18_BLOCKS, channels, num_classes, imagenet_stem=False)
    elif name == "resnet50":
        model = ResNet(Bottleneck, RESNET50_BLOCKS, channels, num_classes, imagenet_stem=True)
    else:
        raise ValueError(f"unknown model {name!r}")
    init_weights(model)
    return model
