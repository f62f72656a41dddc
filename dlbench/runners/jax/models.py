"""Flax linen CNNs in NHWC, layer for layer as torchvision builds them (same parameter counts):
ResNet-50/152 (v1.5: stride in the 3x3 convolution, BatchNorm), VGG-16 and AlexNet (adaptive
average pooling, dropout 0.5 in the classifier). Imports Flax: only `Runner.build` (and the
plain-loop baseline) import this module."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax.numpy as jnp

CLASSES = 1000
RESNET_STAGES = {"resnet50": (3, 4, 6, 3), "resnet152": (3, 8, 36, 3)}
VGG16 = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")
MODELS = (*RESNET_STAGES, "vgg16", "alexnet")


def _norm(train: bool, dtype, **kwargs):
    # torchvision's BatchNorm2d: momentum 0.1 (Flax counts the other way), eps 1e-5
    return nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5, dtype=dtype, **kwargs)


class Bottleneck(nn.Module):
    features: int
    strides: int = 1
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, train: bool):
        conv = functools.partial(nn.Conv, use_bias=False, dtype=self.dtype)
        strides = (self.strides, self.strides)
        y = nn.relu(_norm(train, self.dtype)(conv(self.features, (1, 1))(x)))
        y = conv(self.features, (3, 3), strides=strides, padding=((1, 1), (1, 1)))(y)
        y = nn.relu(_norm(train, self.dtype)(y))
        y = _norm(train, self.dtype)(conv(self.features * 4, (1, 1))(y))
        if x.shape != y.shape:
            x = _norm(train, self.dtype)(conv(self.features * 4, (1, 1), strides=strides)(x))
        return nn.relu(x + y)


class ResNet(nn.Module):
    stages: Sequence[int]
    num_classes: int = CLASSES
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, train: bool = True):
        x = nn.Conv(64, (7, 7), strides=(2, 2), padding=((3, 3), (3, 3)), use_bias=False, dtype=self.dtype)(x)
        x = nn.relu(_norm(train, self.dtype)(x))
        x = nn.max_pool(x, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
        for i, blocks in enumerate(self.stages):
            for j in range(blocks):
                x = Bottleneck(64 * 2**i, strides=2 if i > 0 and j == 0 else 1, dtype=self.dtype)(x, train)
        x = jnp.mean(x, axis=(1, 2))
        return nn.Dense(self.num_classes, dtype=self.dtype)(x)


def adaptive_avg_pool(x, size: int):
    """torch.nn.AdaptiveAvgPool2d((size, size)) on NHWC: bin i spans [floor(i·n/size), ceil((i+1)·n/size))."""
    for axis in (1, 2):
        n = x.shape[axis]
        if n == size:
            continue
        bins = [(i * n // size, -(-(i + 1) * n // size)) for i in range(size)]
        x = jnp.concatenate(
            [jnp.mean(x[:, a:b] if axis == 1 else x[:, :, a:b], axis=axis, keepdims=True) for a, b in bins], axis=axis
        )
    return x


class Classifier(nn.Module):
    """Dropout, Dense 4096, ReLU, twice, then the class layer (VGG's and AlexNet's head)."""

    num_classes: int
    dtype: Any

    @nn.compact
    def __call__(self, x, train: bool, dropout_first: bool):
        for _ in range(2):
            if dropout_first:
                x = nn.Dropout(0.5, deterministic=not train)(x)
            x = nn.relu(nn.Dense(4096, dtype=self.dtype)(x))
            if not dropout_first:
                x = nn.Dropout(0.5, deterministic=not train)(x)
        return nn.Dense(self.num_classes, dtype=self.dtype)(x)


class VGG(nn.Module):
    layers: Sequence = VGG16
    num_classes: int = CLASSES
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, train: bool = True):
        for width in self.layers:
            if width == "M":
                x = nn.max_pool(x, (2, 2), strides=(2, 2))
            else:
                x = nn.relu(nn.Conv(width, (3, 3), padding=((1, 1), (1, 1)), dtype=self.dtype)(x))
        x = adaptive_avg_pool(x, 7).reshape((x.shape[0], -1))
        return Classifier(self.num_classes, self.dtype)(x, train, dropout_first=False)


class AlexNet(nn.Module):
    num_classes: int = CLASSES
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, train: bool = True):
        conv = functools.partial(nn.Conv, dtype=self.dtype)
        pool = functools.partial(nn.max_pool, window_shape=(3, 3), strides=(2, 2))
        x = pool(nn.relu(conv(64, (11, 11), strides=(4, 4), padding=((2, 2), (2, 2)))(x)))
        x = pool(nn.relu(conv(192, (5, 5), padding=((2, 2), (2, 2)))(x)))
        for width in (384, 256, 256):
            x = nn.relu(conv(width, (3, 3), padding=((1, 1), (1, 1)))(x))
        x = adaptive_avg_pool(pool(x), 6).reshape((x.shape[0], -1))
        return Classifier(self.num_classes, self.dtype)(x, train, dropout_first=True)


def build(model: str, dtype=jnp.float32) -> nn.Module:
    if model in RESNET_STAGES:
        return ResNet(RESNET_STAGES[model], dtype=dtype)
    if model == "vgg16":
        return VGG(dtype=dtype)
    if model == "alexnet":
        return AlexNet(dtype=dtype)
    raise ValueError(f"jax runner: no model {model!r} (have {MODELS})")
