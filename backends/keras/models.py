"""The three networks as Keras 3 functional models (any Keras engine), NHWC.

Layer names are the neutral layer names with "_" for "." (``layer1_0_conv1``; the PyTorch engine
refuses dots in names, and neutral layer names have no "_"), so weight conversion is by name.
PyTorch pads 3x3/stride-2 convolutions symmetrically while Keras' "same" pads (0, 1) on even
inputs, so strided convolutions get an explicit ZeroPadding2D and "valid" padding: the networks
compute the same function, not merely the same shapes.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import layers

from cnnbench.model.facts import (
    BN_EPSILON,
    BN_MOMENTUM,
    BOTTLENECK_EXPANSION,
    RESNET18_BLOCKS,
    RESNET50_BLOCKS,
    RESNET_WIDTHS,
    image_hw,
    smallcnn_dims,
)
from cnnbench.model.layout import flatten_shape, group_by_layer, hwio_to_neutral, neutral_layout, neutral_to_hwio


def conv_init() -> keras.initializers.Initializer:
    # He-normal, fan-out (PyTorch's kaiming_normal_(mode="fan_out")): untruncated, like PyTorch.
    return keras.initializers.VarianceScaling(2.0, "fan_out", "untruncated_normal")


def dense_init() -> keras.initializers.Initializer:
    # U(+-1/sqrt(fan_in)), PyTorch's nn.Linear default: scale 1/3 with a uniform distribution.
    return keras.initializers.VarianceScaling(1.0 / 3.0, "fan_in", "uniform")


def keras_name(neutral: str) -> str:
    """The Keras layer name of a neutral layer name."""
    return neutral.replace(".", "_")


class _Builder:
    def __init__(self, sync_bn: bool) -> None:
        self.sync_bn = sync_bn

    def conv(self, x, filters: int, k: int, stride: int, name: str, bias: bool = False):
        if stride > 1 and k > 1:
            x = layers.ZeroPadding2D(k // 2, name=keras_name(f"{name}.pad"))(x)
            padding = "valid"
        else:
            padding = "same"
        return layers.Conv2D(filters, k, stride, padding=padding, use_bias=bias, name=keras_name(name),
                             kernel_initializer=conv_init(), bias_initializer="zeros")(x)

    def bn(self, x, name: str):
        # Keras' momentum is the weight of the *old* statistic: 1 - PyTorch's momentum.
        kwargs = {"synchronized": True} if self.sync_bn else {}
        return layers.BatchNormalization(momentum=1.0 - BN_MOMENTUM, epsilon=BN_EPSILON, name=keras_name(name),
                                         **kwargs)(x)

    def basic(self, x, cin: int, width: int, stride: int, name: str):
        shortcut = x
        if stride != 1 or cin != width:
            shortcut = self.bn(self.conv(x, width, 1, stride, f"{name}.downsample.0"), f"{name}.downsample.1")
        out = layers.ReLU()(self.bn(self.conv(x, width, 3, stride, f"{name}.conv1"), f"{name}.bn1"))
        out = self.bn(self.conv(out, width, 3, 1, f"{name}.conv2"), f"{name}.bn2")
        return layers.ReLU()(layers.Add()([out, shortcut]))

    def bottleneck(self, x, cin: int, width: int, stride: int, name: str):
        cout = width * BOTTLENECK_EXPANSION
        shortcut = x
        if stride != 1 or cin != cout:
            shortcut = self.bn(self.conv(x, cout, 1, stride, f"{name}.downsample.0"), f"{name}.downsample.1")
        out = layers.ReLU()(self.bn(self.conv(x, width, 1, 1, f"{name}.conv1"), f"{name}.bn1"))
        out = layers.ReLU()(self.bn(self.conv(out, width, 3, stride, f"{name}.conv2"), f"{name}.bn2"))
        out = self.bn(self.conv(out, cout, 1, 1, f"{name}.conv3"), f"{name}.bn3")
        return layers.ReLU()(layers.Add()([out, shortcut]))


def _logits(x, num_classes: int):
    x = layers.Dense(num_classes, name="fc", kernel_initializer=dense_init(),
                     bias_initializer="zeros")(x)
    # Under a mixed policy the last layer computes in bf16; the loss wants float32 logits.
    return layers.Activation("linear", dtype="float32", name="logits")(x)


def build_model(name: str, image_size: int | tuple[int, int], channels: int, num_classes: int,
                sync_bn: bool = False) -> keras.Model:
    inputs = keras.Input((*image_hw(image_size), channels), name="images")
    b = _Builder(sync_bn)
    if name == "smallcnn":
        d = smallcnn_dims(image_size, channels, num_classes)
        x = layers.MaxPooling2D(2)(layers.ReLU()(b.conv(inputs, d["conv1"], 3, 1, "conv1", bias=True)))
        x = layers.MaxPooling2D(2)(layers.ReLU()(b.conv(x, d["conv2"], 3, 1, "conv2", bias=True)))
        x = layers.Flatten()(x)  # (H, W, C) order: converted to the neutral (C, H, W) in weights
        x = layers.Dense(d["hidden"], name="fc1", kernel_initializer=dense_init())(x)
        x = layers.Dense(num_classes, name="fc2", kernel_initializer=dense_init())(layers.ReLU()(x))
        outputs = layers.Activation("linear", dtype="float32", name="logits")(x)
        return keras.Model(inputs, outputs, name=name)
    bottleneck = name == "resnet50"
    if bottleneck:
        x = layers.ReLU()(b.bn(b.conv(inputs, 64, 7, 2, "conv1"), "bn1"))
        # Zero padding equals PyTorch's -inf padding here: the inputs are >= 0 after the ReLU.
        x = layers.MaxPooling2D(3, 2)(layers.ZeroPadding2D(1)(x))
    else:
        x = layers.ReLU()(b.bn(b.conv(inputs, 64, 3, 1, "conv1"), "bn1"))
    cin = 64
    for stage, (count, width) in enumerate(zip(RESNET50_BLOCKS if bottleneck else RESNET18_BLOCKS,
                                               RESNET_WIDTHS), start=1):
        for index in range(count):
            stride = 2 if stage > 1 and index == 0 else 1
            block = b.bottleneck if bottleneck else b.basic
            x = block(x, cin, width, stride, f"layer{stage}.{index}")
            cin = width * (BOTTLENECK_EXPANSION if bottleneck else 1)
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, _logits(x, num_classes), name=name)


# -- neutral weights <-> Keras ------------------------------------------------------------------


def get_neutral_weights(model: keras.Model, num_classes: int) -> dict[str, np.ndarray]:
    size, channels = model.input_shape[1:3], model.input_shape[3]
    out: dict[str, np.ndarray] = {}
    for layer_name, suffixes in group_by_layer(neutral_layout(model.name, size, channels, num_classes)).items():
        flatten = flatten_shape(model.name, layer_name, size)
        # Keras keeps (kernel, bias) and (gamma, beta, moving_mean, moving_variance): the neutral order.
        for suffix, variable in zip(suffixes, model.get_layer(keras_name(layer_name)).weights):
            value = np.asarray(keras.ops.convert_to_numpy(variable), np.float32)
            out[f"{layer_name}.{suffix}"] = hwio_to_neutral(value, flatten)
    return out


def set_neutral_weights(model: keras.Model, weights: dict[str, np.ndarray], num_classes: int) -> None:
    size, channels = model.input_shape[1:3], model.input_shape[3]
    for layer_name, suffixes in group_by_layer(neutral_layout(model.name, size, channels, num_classes)).items():
        flatten = flatten_shape(model.name, layer_name, size)
        for suffix, variable in zip(suffixes, model.get_layer(keras_name(layer_name)).weights):
            variable.assign(neutral_to_hwio(np.asarray(weights[f"{layer_name}.{suffix}"]), flatten))
