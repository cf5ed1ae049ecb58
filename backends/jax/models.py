"""The three networks in Flax (linen), NHWC, with flat module names equal to the neutral layer names.

Batch norm is a small module of our own because the ``sharded`` strategy needs *local* statistics
per device while the whole step is one jitted SPMD program: it computes statistics over
``groups`` equal slices of the batch (one per device; XLA keeps each slice's reduction on its
device), or, under ``pmap``, over the named axis when statistics are synchronized. With
groups = 1 and no axis it is ordinary batch norm (flax.linen.BatchNorm's arithmetic: float32
statistics, biased variance for the running estimate). The variance takes two passes in float32
(PyTorch's accuracy) and one pass under bf16/fp16 (flax's fast default; about 8% faster on an H200).
"""

from __future__ import annotations

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from cnnbench.model.facts import (
    BN_EPSILON,
    BN_MOMENTUM,
    BOTTLENECK_EXPANSION,
    RESNET18_BLOCKS,
    RESNET50_BLOCKS,
    RESNET_WIDTHS,
    smallcnn_dims,
)
from cnnbench.model.layout import flatten_shape, group_by_layer, hwio_to_neutral, neutral_layout, neutral_to_hwio

conv_init = jax.nn.initializers.variance_scaling(2.0, "fan_out", "normal")  # untruncated He fan-out
dense_init = jax.nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform")  # U(+-1/sqrt(fan_in))


class BatchNorm(nn.Module):
    groups: int = 1
    axis_name: str | None = None
    dtype: Any = jnp.float32
    fast_variance: bool = False

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        channels = x.shape[-1]
        scale = self.param("scale", nn.initializers.ones, (channels,), jnp.float32)
        bias = self.param("bias", nn.initializers.zeros, (channels,), jnp.float32)
        running_mean = self.variable("batch_stats", "mean", jnp.zeros, (channels,), jnp.float32)
        running_var = self.variable("batch_stats", "var", jnp.ones, (channels,), jnp.float32)
        if not train:
            inv = scale * jax.lax.rsqrt(running_var.value + BN_EPSILON)
            return (x * inv.astype(self.dtype) + (bias - running_mean.value * inv).astype(self.dtype))
        grouped = x.reshape((self.groups, -1) + x.shape[1:]).astype(jnp.float32)
        mean = grouped.mean(axis=(1, 2, 3))
        if self.fast_variance:
            # One pass, E[x^2] - E[x]^2 (flax.linen.BatchNorm's default): with bf16 activations its
            # float32 cancellation error is far below bf16's own, and it reads the activations once.
            mean_sq = jnp.square(grouped).mean(axis=(1, 2, 3))
            if self.axis_name:
                mean, mean_sq = jax.lax.pmean((mean, mean_sq), self.axis_name)
            var = jnp.maximum(mean_sq - jnp.square(mean), 0.0)
        else:
            # Two passes, as PyTorch: in float32 the one-pass form moved resnet18_cifar's gradients by
            # 5e-3 (relative) against float64; this form agrees to 5e-6.
            if self.axis_name:
                mean = jax.lax.pmean(mean, self.axis_name)
            var = jnp.square(grouped - mean[:, None, None, None, :]).mean(axis=(1, 2, 3))
            if self.axis_name:
                var = jax.lax.pmean(var, self.axis_name)
        if not self.is_initializing():
            running_mean.value = (1 - BN_MOMENTUM) * running_mean.value + BN_MOMENTUM * mean.mean(0)
            running_var.value = (1 - BN_MOMENTUM) * running_var.value + BN_MOMENTUM * var.mean(0)
        inv = scale * jax.lax.rsqrt(var + BN_EPSILON)  # (groups, C)
        shift = bias - mean * inv
        y = grouped * inv[:, None, None, None, :] + shift[:, None, None, None, :]
        return y.reshape(x.shape).astype(self.dtype)


class SmallCNN(nn.Module):
    num_classes: int
    dtype: Any = jnp.float32
    span: tuple[int, int] | None = None  # a pipeline stage: pieces [start, end) only

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
        # Only the widths are read: Flax infers every layer's input size (the image size is not needed).
        d = smallcnn_dims(0, 0, self.num_classes)
        conv = {"kernel_size": (3, 3), "padding": ((1, 1), (1, 1)), "kernel_init": conv_init, "dtype": self.dtype}

        def head(x):
            x = x.reshape(x.shape[0], -1)  # (H, W, C) order; converted to (C, H, W) in the weights
            x = nn.relu(nn.Dense(d["hidden"], name="fc1", kernel_init=dense_init, dtype=self.dtype)(x))
            return nn.Dense(self.num_classes, name="fc2", kernel_init=dense_init, dtype=self.dtype)(x).astype(
                jnp.float32)

        pieces = [lambda x: nn.max_pool(nn.relu(nn.Conv(d["conv1"], name="conv1", **conv)(x.astype(self.dtype))),
                                        (2, 2), (2, 2)),
                  lambda x: nn.max_pool(nn.relu(nn.Conv(d["conv2"], name="conv2", **conv)(x)), (2, 2), (2, 2)),
                  head]
        return run_pieces(pieces, self.span, x)


def run_pieces(pieces: list, span: tuple[int, int] | None, x: jax.Array) -> jax.Array:
    """The whole forward pass, or a pipeline stage's part of it (the same pieces as PyTorch's)."""
    start, end = span or (0, len(pieces))
    if not 0 <= start < end <= len(pieces):  # cnnbench.model.pipeline's piece count disagrees with this model
        raise ValueError(f"pipeline span {span} outside the model's {len(pieces)} pieces")
    for piece in pieces[start:end]:
        x = piece(x)
    return x


class ResNet(nn.Module):
    num_classes: int
    bottleneck: bool
    bn_groups: int = 1
    bn_axis: str | None = None
    dtype: Any = jnp.float32
    span: tuple[int, int] | None = None  # a pipeline stage: pieces [start, end) only

    def _conv(self, x, features: int, k: int, stride: int, name: str):
        pad = k // 2
        return nn.Conv(features, (k, k), (stride, stride), padding=((pad, pad), (pad, pad)),
                       use_bias=False, kernel_init=conv_init, dtype=self.dtype, name=name)(x)

    def _bn(self, x, name: str, train: bool):
        # Reduced precision: the one-pass variance (fast, accurate enough); float32: two passes.
        fast = self.dtype != jnp.float32
        return BatchNorm(self.bn_groups, self.bn_axis, self.dtype, fast, name=name)(x, train)

    def _block(self, x, cin: int, width: int, stride: int, name: str, train: bool):
        cout = width * (BOTTLENECK_EXPANSION if self.bottleneck else 1)
        shortcut = x
        if stride != 1 or cin != cout:
            shortcut = self._bn(self._conv(x, cout, 1, stride, f"{name}.downsample.0"), f"{name}.downsample.1", train)
        if self.bottleneck:
            out = nn.relu(self._bn(self._conv(x, width, 1, 1, f"{name}.conv1"), f"{name}.bn1", train))
            out = nn.relu(self._bn(self._conv(out, width, 3, stride, f"{name}.conv2"), f"{name}.bn2", train))
            out = self._bn(self._conv(out, cout, 1, 1, f"{name}.conv3"), f"{name}.bn3", train)
        else:
            out = nn.relu(self._bn(self._conv(x, width, 3, stride, f"{name}.conv1"), f"{name}.bn1", train))
            out = self._bn(self._conv(out, width, 3, 1, f"{name}.conv2"), f"{name}.bn2", train)
        return nn.relu(out + shortcut)

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
        def stem(x):
            x = x.astype(self.dtype)
            if self.bottleneck:
                x = nn.relu(self._bn(self._conv(x, 64, 7, 2, "conv1"), "bn1", train))
                return nn.max_pool(x, (3, 3), (2, 2), padding=((1, 1), (1, 1)))
            return nn.relu(self._bn(self._conv(x, 64, 3, 1, "conv1"), "bn1", train))

        def head(x):
            x = x.mean(axis=(1, 2))
            return nn.Dense(self.num_classes, name="fc", kernel_init=dense_init, dtype=self.dtype)(x).astype(
                jnp.float32)

        pieces, cin = [stem], 64
        for stage, (count, width) in enumerate(zip(RESNET50_BLOCKS if self.bottleneck else RESNET18_BLOCKS,
                                                   RESNET_WIDTHS), start=1):
            for index in range(count):
                stride = 2 if stage > 1 and index == 0 else 1
                pieces.append(functools.partial(self._block, cin=cin, width=width, stride=stride,
                                                name=f"layer{stage}.{index}", train=train))
                cin = width * (BOTTLENECK_EXPANSION if self.bottleneck else 1)
        return run_pieces([*pieces, head], self.span, x)


def build_model(name: str, num_classes: int, dtype: Any = jnp.float32, bn_groups: int = 1,
                bn_axis: str | None = None, span: tuple[int, int] | None = None) -> nn.Module:
    """A model, or with ``span`` the pieces [start, end) of it that one pipeline stage runs."""
    if name == "smallcnn":
        return SmallCNN(num_classes, dtype, span)
    if name in ("resnet18_cifar", "resnet50"):
        return ResNet(num_classes, name == "resnet50", bn_groups, bn_axis, dtype, span)
    raise ValueError(f"unknown model {name!r}")


# -- neutral weights <-> Flax variables ------------------------------------------------------------

_BN_LEAVES = {"weight": ("params", "scale"), "bias": ("params", "bias"),
              "running_mean": ("batch_stats", "mean"), "running_var": ("batch_stats", "var")}


def _leaf(suffix: str, is_bn: bool) -> tuple[str, str]:
    if is_bn:
        return _BN_LEAVES[suffix]
    return "params", "kernel" if suffix == "weight" else "bias"


def state_to_neutral(params: Any, batch_stats: Any, model: str, image_size: int | tuple[int, int], channels: int,
                     num_classes: int) -> dict[str, np.ndarray]:
    trees = {"params": params, "batch_stats": batch_stats}
    out = {}
    for layer, suffixes in group_by_layer(neutral_layout(model, image_size, channels, num_classes)).items():
        is_bn = "running_mean" in suffixes
        for suffix in suffixes:
            collection, leaf = _leaf(suffix, is_bn)
            value = np.asarray(trees[collection][layer][leaf], np.float32)
            out[f"{layer}.{suffix}"] = hwio_to_neutral(value, flatten_shape(model, layer, image_size))
    return out


def neutral_to_state(weights: dict[str, np.ndarray], model: str, image_size: int | tuple[int, int], channels: int,
                     num_classes: int) -> tuple[dict, dict]:
    trees: dict[str, dict] = {"params": {}, "batch_stats": {}}
    for layer, suffixes in group_by_layer(neutral_layout(model, image_size, channels, num_classes)).items():
        is_bn = "running_mean" in suffixes
        for suffix in suffixes:
            collection, leaf = _leaf(suffix, is_bn)
            value = neutral_to_hwio(np.asarray(weights[f"{layer}.{suffix}"], np.float32),
                                    flatten_shape(model, layer, image_size))
            trees[collection].setdefault(layer, {})[leaf] = value
    return trees["params"], trees["batch_stats"]
