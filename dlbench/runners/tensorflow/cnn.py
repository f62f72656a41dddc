"""The seed CNNs in TensorFlow-native ops, NHWC, as tf_cnn_benchmarks builds them.

Why not keras.applications: Keras 3's BatchNormalization is not fused and its layers add
ops per call; measured at 224 px (docs/frameworks/tensorflow.md) these models train ResNet-50
about 1.4x faster. Each model is a declarative layer list (shapes inferred once), its
variables created in a fixed order with seeded initial values, and a forward function of
plain `tf.nn` ops: `conv2d`, `FusedBatchNormV3`, pooling, `matmul`. Imported only in
`Runner.build()` (it imports TensorFlow).
"""

from __future__ import annotations

import math

import tensorflow as tf

BN_DECAY = 0.99  # moving statistics (Keras's default momentum)


class Variables:
    """Creates a model's variables in order: seeded Glorot-uniform weights (Keras's default),
    zeros/ones; moving statistics with the synchronisation the strategy needs."""

    def __init__(self, seed: int, stats_kwargs: dict):
        self.seed, self.count = seed, 0
        self.trainable: list = []
        self.stats: list = []
        self.stats_kwargs = stats_kwargs

    def _new(self, initial, trainable: bool):
        self.count += 1
        if not trainable:
            v = tf.Variable(initial, trainable=False, name=f"stat{self.count}", **self.stats_kwargs)
            self.stats.append(v)
            return v
        v = tf.Variable(initial, name=f"w{self.count}")
        self.trainable.append(v)
        return v

    def glorot(self, shape, fan_in: int, fan_out: int):
        limit = math.sqrt(6.0 / (fan_in + fan_out))
        initial = tf.random.stateless_uniform(shape, seed=[self.seed, self.count], minval=-limit, maxval=limit)
        return self._new(initial, True)

    def constant(self, shape, value: float, trainable: bool = True):
        return self._new(tf.fill(shape, value), trainable)


@tf.custom_gradient
def bias_add(y, bias):
    """tf.nn.bias_add, its gradient gated as tf.gradients' gate_gradients does it: the incoming
    gradient passes on after its BiasAddGrad. Ungated, oneDNN's graph pass fuses BiasAddGrad
    into the conv's filter gradient (_MklConv2DBackpropFilterWithBias), slower than the two
    ops apart at VGG-16's 224-px layers (docs/frameworks/tensorflow.md)."""

    def grad(dy):
        bias_grad = tf.raw_ops.BiasAddGrad(out_backprop=dy)
        with tf.control_dependencies([bias_grad]):
            return tf.identity(dy), bias_grad

    return tf.nn.bias_add(y, bias), grad


class Conv:
    """conv2d (+ fused batch norm) (+ bias) (+ ReLU). padding: "SAME", "VALID" or explicit pixels."""

    def __init__(self, filters, kernel, stride=1, padding="SAME", bn=True, relu=True, bias=False, scale=True, eps=1e-3):
        self.filters, self.stride, self.relu, self.eps = filters, stride, relu, eps
        self.kernel = (kernel, kernel) if isinstance(kernel, int) else tuple(kernel)
        self.padding, self.bn, self.bias, self.scale = padding, bn, bias and not bn, scale

    def build(self, shape, v: Variables):
        h, w, c = shape
        kh, kw = self.kernel
        self.w = v.glorot([kh, kw, c, self.filters], kh * kw * c, kh * kw * self.filters)
        if self.bias:
            self.b = v.constant([self.filters], 0.0)
        if self.bn:
            self.gamma = v.constant([self.filters], 1.0) if self.scale else tf.ones([self.filters])
            self.beta = v.constant([self.filters], 0.0)
            self.mean = v.constant([self.filters], 0.0, trainable=False)
            self.var = v.constant([self.filters], 1.0, trainable=False)
        if isinstance(self.padding, int):
            h, w = h + 2 * self.padding, w + 2 * self.padding
        if self.padding == "SAME":
            return (-(-h // self.stride), -(-w // self.stride), self.filters)
        return ((h - kh) // self.stride + 1, (w - kw) // self.stride + 1, self.filters)

    def __call__(self, x, training: bool):
        padding = self.padding
        if isinstance(padding, int):
            x = tf.pad(x, [[0, 0], [padding, padding], [padding, padding], [0, 0]])
            padding = "VALID"
        y = tf.nn.conv2d(x, tf.cast(self.w, x.dtype), self.stride, padding)
        if self.bias:
            y = bias_add(y, tf.cast(self.b, y.dtype))
        if self.bn:
            y = self._batch_norm(y, training)
        return tf.nn.relu(y) if self.relu else y

    def _batch_norm(self, y, training: bool):
        if not training:
            return tf.compat.v1.nn.fused_batch_norm(
                y, self.gamma, self.beta, self.mean, self.var, epsilon=self.eps, is_training=False
            )[0]
        y, mean, var = tf.compat.v1.nn.fused_batch_norm(
            y,
            self.gamma,
            self.beta,
            self.mean,
            self.var,
            epsilon=self.eps,
            is_training=True,
            exponential_avg_factor=1.0 - BN_DECAY,
        )[:3]
        self.mean.assign(mean)
        self.var.assign(var)
        return y


class Pool:
    def __init__(self, kind: str, size: int, stride: int, padding: str | int = "VALID"):
        self.kind, self.size, self.stride, self.padding = kind, size, stride, padding

    def build(self, shape, v):
        h, w, c = shape
        if isinstance(self.padding, int):
            h, w = h + 2 * self.padding, w + 2 * self.padding
        if self.padding == "SAME":
            return (-(-h // self.stride), -(-w // self.stride), c)
        return ((h - self.size) // self.stride + 1, (w - self.size) // self.stride + 1, c)

    def __call__(self, x, training):
        padding = self.padding
        if isinstance(padding, int):
            x = tf.pad(x, [[0, 0], [padding, padding], [padding, padding], [0, 0]])
            padding = "VALID"
        pool = tf.nn.max_pool2d if self.kind == "max" else tf.nn.avg_pool2d
        return pool(x, self.size, self.stride, padding)


class Branches:
    """Parallel layer lists on the same input, concatenated on channels (Inception)."""

    def __init__(self, *branches):
        self.branches = [Sequential(b) if isinstance(b, list) else b for b in branches]

    def build(self, shape, v):
        outs = [b.build(shape, v) for b in self.branches]
        return (*outs[0][:2], sum(o[2] for o in outs))

    def __call__(self, x, training):
        return tf.concat([b(x, training) for b in self.branches], axis=3)


class Residual:
    """ReLU(main(x) + shortcut(x)); the shortcut is identity when not given."""

    def __init__(self, main: list, shortcut: list | None = None):
        self.main = Sequential(main)
        self.shortcut = Sequential(shortcut) if shortcut else None

    def build(self, shape, v):
        out = self.main.build(shape, v)
        if self.shortcut is not None:
            self.shortcut.build(shape, v)
        return out

    def __call__(self, x, training):
        short = self.shortcut(x, training) if self.shortcut is not None else x
        return tf.nn.relu(self.main(x, training) + short)


class Sequential:
    def __init__(self, layers: list):
        self.layers = layers

    def build(self, shape, v):
        for layer in self.layers:
            shape = layer.build(shape, v)
        return shape

    def __call__(self, x, training):
        for layer in self.layers:
            x = layer(x, training)
        return x


class Head:
    """Global average pool (or adaptive average pool to `adaptive` x `adaptive`, torch's
    semantics, then flatten), dropout before hidden dense layers, ReLU between, logits out."""

    def __init__(self, units: list[int], adaptive: int = 0, flatten: bool = False, dropout: float = 0.0):
        self.units, self.adaptive, self.flatten, self.dropout = units, adaptive, flatten, dropout

    def build(self, shape, v):
        h, w, c = shape
        self.in_shape = shape
        if self.adaptive:
            self.ph = tf.constant(adaptive_pool_matrix(h, self.adaptive))
            self.pw = tf.constant(adaptive_pool_matrix(w, self.adaptive))
            n = self.adaptive * self.adaptive * c
        else:
            n = h * w * c if self.flatten else c
        self.dense = []
        for units in self.units:
            self.dense.append((v.glorot([n, units], n, units), v.constant([units], 0.0)))
            n = units
        return (n,)

    def __call__(self, x, training):
        if self.adaptive:
            x = tf.einsum("ih,bhwc,jw->bijc", tf.cast(self.ph, x.dtype), x, tf.cast(self.pw, x.dtype))
        flat = self.adaptive or self.flatten
        x = tf.reshape(x, [tf.shape(x)[0], -1]) if flat else tf.reduce_mean(x, axis=[1, 2])
        for i, (w, b) in enumerate(self.dense):
            last = i == len(self.dense) - 1
            if self.dropout and training and not last:
                x = tf.nn.dropout(x, self.dropout)
            x = tf.matmul(x, tf.cast(w, x.dtype)) + tf.cast(b, x.dtype)
            if not last:
                x = tf.nn.relu(x)
        return x


def adaptive_pool_matrix(n_in: int, n_out: int) -> list[list[float]]:
    """torch.nn.AdaptiveAvgPool semantics: bin i averages [floor(i*n/o), ceil((i+1)*n/o))."""
    rows = []
    for i in range(n_out):
        start, end = (i * n_in) // n_out, -((-(i + 1) * n_in) // n_out)
        rows.append([1.0 / (end - start) if start <= j < end else 0.0 for j in range(n_in)])
    return rows


# -- the models -------------------------------------------------------------------------------


def resnet_v1_5(blocks: tuple[int, ...], classes: int) -> list:
    """ResNet v1.5 (the stride of each down-sampling block on its 3x3 conv, as torchvision,
    MLPerf and tf_cnn_benchmarks' `resnet50_v1.5`; the other runners build it too,
    docs/frameworks/tensorflow.md): no conv biases before batch norm (epsilon 1.001e-5, as Keras)."""

    def cbn(filters, kernel, stride=1, padding="SAME", relu=True):
        return Conv(filters, kernel, stride, padding, relu=relu, eps=1.001e-5)

    layers = [cbn(64, 7, 2, 3), Pool("max", 3, 2, 1)]
    for stage, count in enumerate(blocks):
        filters = 64 * 2**stage
        for i in range(count):
            stride = 2 if i == 0 and stage > 0 else 1
            # Explicit padding on the strided 3x3 (torchvision's 1 each side, not SAME's 0/1).
            middle = cbn(filters, 3, stride, 1) if stride > 1 else cbn(filters, 3)
            main = [cbn(filters, 1, 1, "VALID"), middle, cbn(4 * filters, 1, relu=False)]
            shortcut = [cbn(4 * filters, 1, stride, "VALID", relu=False)] if i == 0 else None
            layers.append(Residual(main, shortcut))
    return layers + [Head([classes])]


def vgg16(classes: int) -> list:
    """VGG-16 (configuration D): 3x3 convs with bias, 2x2 max pools, three dense layers on the
    flattened last feature map (as Keras's VGG16; equal to torchvision's at 224 px)."""
    layers = []
    for filters, count in ((64, 2), (128, 2), (256, 3), (512, 3), (512, 3)):
        layers += [Conv(filters, 3, bn=False, bias=True) for _ in range(count)]
        layers.append(Pool("max", 2, 2))
    return layers + [Head([4096, 4096, classes], flatten=True)]


def alexnet(classes: int) -> list:
    """torchvision's AlexNet layout: explicit paddings, VALID convs with bias, 3x3/2 max pools,
    adaptive average pool to 6x6, dropout 0.5 before the two 4096 layers (61,100,840 params)."""
    layers = []
    for filters, kernel, stride, pad, pool in (
        (64, 11, 4, 2, True),
        (192, 5, 1, 2, True),
        (384, 3, 1, 1, False),
        (256, 3, 1, 1, False),
        (256, 3, 1, 1, True),
    ):
        layers.append(Conv(filters, kernel, stride, pad, bn=False, bias=True))
        if pool:
            layers.append(Pool("max", 3, 2))
    return layers + [Head([4096, 4096, classes], adaptive=6, dropout=0.5)]


def inception_v3(classes: int) -> list:
    """Inception-v3 (Szegedy et al. 2015) as Keras's InceptionV3: conv + batch norm without
    scale (epsilon 1e-3) + ReLU everywhere, no auxiliary head."""

    def c(filters, kh, kw=None, stride=1, padding="SAME"):
        return Conv(filters, (kh, kw or kh), stride, padding, scale=False)

    def avg(filters):
        return [Pool("avg", 3, 1, "SAME"), c(filters, 1)]

    layers = [c(32, 3, stride=2, padding="VALID"), c(32, 3, padding="VALID"), c(64, 3), Pool("max", 3, 2)]
    layers += [c(80, 1, padding="VALID"), c(192, 3, padding="VALID"), Pool("max", 3, 2)]
    for pool_filters in (32, 64, 64):
        layers.append(Branches([c(64, 1)], [c(48, 1), c(64, 5)], [c(64, 1), c(96, 3), c(96, 3)], avg(pool_filters)))
    layers.append(
        Branches(
            [c(384, 3, stride=2, padding="VALID")],
            [c(64, 1), c(96, 3), c(96, 3, stride=2, padding="VALID")],
            [Pool("max", 3, 2)],
        )
    )
    for f in (128, 160, 160, 192):
        layers.append(
            Branches(
                [c(192, 1)],
                [c(f, 1), c(f, 1, 7), c(192, 7, 1)],
                [c(f, 1), c(f, 7, 1), c(f, 1, 7), c(f, 7, 1), c(192, 1, 7)],
                avg(192),
            )
        )
    layers.append(
        Branches(
            [c(192, 1), c(320, 3, stride=2, padding="VALID")],
            [c(192, 1), c(192, 1, 7), c(192, 7, 1), c(192, 3, stride=2, padding="VALID")],
            [Pool("max", 3, 2)],
        )
    )
    for _ in range(2):
        layers.append(
            Branches(
                [c(320, 1)],
                [c(384, 1), Branches([c(384, 1, 3)], [c(384, 3, 1)])],
                [c(448, 1), c(384, 3), Branches([c(384, 1, 3)], [c(384, 3, 1)])],
                avg(192),
            )
        )
    return layers + [Head([classes])]


ARCHITECTURES = {
    "resnet50": lambda classes: resnet_v1_5((3, 4, 6, 3), classes),
    "resnet152": lambda classes: resnet_v1_5((3, 8, 36, 3), classes),
    "vgg16": vgg16,
    "inception_v3": inception_v3,
    "alexnet": alexnet,
}


class ImageModel(tf.Module):
    """An ImageNet classifier for `size` x `size` NHWC images; `model(images, training)` gives logits.

    `compute_dtype` (bfloat16/float16 under AMP): activations and weights are cast to it,
    variables and batch-norm statistics stay float32.
    """

    def __init__(self, name: str, size: int, classes: int, seed: int, stats_kwargs: dict, compute_dtype="float32"):
        super().__init__(name=name)
        self.net = Sequential(ARCHITECTURES[name](classes))
        self._vars = Variables(seed, stats_kwargs)
        self.net.build((size, size, 3), self._vars)
        self.compute_dtype = tf.as_dtype(compute_dtype)

    @property
    def trainable_variables(self):
        return list(self._vars.trainable)

    @property
    def variables(self):
        return list(self._vars.trainable) + list(self._vars.stats)

    def __call__(self, images, training: bool = True):
        return self.net(tf.cast(images, self.compute_dtype), training)
