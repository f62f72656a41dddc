"""The fastest plain TensorFlow training loop known here: a TF1-style graph of TF-native ops.

    .venvs/tensorflow/bin/python benchmarks/baselines/tensorflow_graph.py \
        --model resnet50 --batch 8 --image-size 224 --steps 20 --warmup 5 --threads 2

Written apart from the dlbench runner (nothing imported from dlbench), the way
tf_cnn_benchmarks trains on a CPU: graph mode and one `Session.run` per step, NHWC,
`tf.nn.conv2d` without bias before a fused batch norm (`is_training`, moving averages
updated in the step), a synthetic batch held in a non-trainable variable, softmax
cross-entropy, `MomentumOptimizer` (lr 0.01, momentum 0.9: one `ApplyMomentum` per
variable). Models: resnet50 / resnet152 (v1.5: stride on the 3x3 conv, as the runner), vgg16.

Prints images/s over the measured steps (wall clock around the measured loop, after
--warmup steps) and the last loss.
"""

from __future__ import annotations

import os
import time

from baseline_args import baseline_arguments


def build_resnet(tf, x, blocks, classes, training=True):
    v1 = tf.compat.v1

    def conv_bn(x, filters, k, stride, relu=True):
        cin = x.shape[-1]
        w = v1.get_variable(f"w{len(v1.trainable_variables())}", [k, k, cin, filters])
        if k > 1 and stride > 1:
            pad = (k - 1) // 2
            x = tf.pad(x, [[0, 0], [pad, k - 1 - pad], [pad, k - 1 - pad], [0, 0]])
            y = tf.nn.conv2d(x, w, stride, "VALID")
        else:
            y = tf.nn.conv2d(x, w, stride, "SAME")
        n = len(v1.trainable_variables())
        gamma = v1.get_variable(f"g{n}", [filters], initializer=v1.ones_initializer())
        beta = v1.get_variable(f"b{n}", [filters], initializer=v1.zeros_initializer())
        mean = v1.get_variable(f"m{n}", [filters], initializer=v1.zeros_initializer(), trainable=False)
        var = v1.get_variable(f"v{n}", [filters], initializer=v1.ones_initializer(), trainable=False)
        y, m, s = v1.nn.fused_batch_norm(
            y, gamma, beta, mean, var, epsilon=1.001e-5, is_training=training, exponential_avg_factor=0.01
        )[:3]
        v1.add_to_collection(v1.GraphKeys.UPDATE_OPS, v1.assign(mean, m))
        v1.add_to_collection(v1.GraphKeys.UPDATE_OPS, v1.assign(var, s))
        return tf.nn.relu(y) if relu else y

    x = conv_bn(x, 64, 7, 2)
    x = tf.nn.max_pool2d(tf.pad(x, [[0, 0], [1, 1], [1, 1], [0, 0]]), 3, 2, "VALID")
    for stage, count in enumerate(blocks):
        filters = 64 * 2**stage
        for i in range(count):
            stride = 2 if i == 0 and stage > 0 else 1
            short = conv_bn(x, 4 * filters, 1, stride, relu=False) if i == 0 else x
            y = conv_bn(x, filters, 1, 1)
            y = conv_bn(y, filters, 3, stride)
            y = conv_bn(y, 4 * filters, 1, 1, relu=False)
            x = tf.nn.relu(y + short)
    x = tf.reduce_mean(x, [1, 2])
    return dense(tf, x, classes, relu=False)


def dense(tf, x, units, relu=True):
    v1 = tf.compat.v1
    n = len(v1.trainable_variables())
    w = v1.get_variable(f"d{n}", [x.shape[-1], units])
    b = v1.get_variable(f"db{n}", [units], initializer=v1.zeros_initializer())
    y = tf.matmul(x, w) + b
    return tf.nn.relu(y) if relu else y


def build_vgg16(tf, x, classes):
    v1 = tf.compat.v1
    for filters, count in ((64, 2), (128, 2), (256, 3), (512, 3), (512, 3)):
        for _ in range(count):
            n = len(v1.trainable_variables())
            w = v1.get_variable(f"w{n}", [3, 3, x.shape[-1], filters])
            b = v1.get_variable(f"b{n}", [filters], initializer=v1.zeros_initializer())
            x = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w, 1, "SAME"), b))
        x = tf.nn.max_pool2d(x, 2, 2, "VALID")
    x = tf.reshape(x, [-1, x.shape[1] * x.shape[2] * x.shape[3]])
    return dense(tf, dense(tf, dense(tf, x, 4096), 4096), classes, relu=False)


MODELS = {
    "resnet50": lambda tf, x: build_resnet(tf, x, (3, 4, 6, 3), 1000),
    "resnet152": lambda tf, x: build_resnet(tf, x, (3, 8, 36, 3), 1000),
    "vgg16": lambda tf, x: build_vgg16(tf, x, 1000),
}


def main() -> None:
    p = baseline_arguments(__doc__.splitlines()[0], MODELS, 2)
    p.add_argument("--inter-op", type=int, default=1, help="inter-op threads (1, as tf_cnn_benchmarks is run)")
    args = p.parse_args()

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    v1 = tf.compat.v1
    v1.disable_eager_execution()
    v1.set_random_seed(0)
    size = args.image_size
    images = v1.get_variable(
        "images", [args.batch, size, size, 3], initializer=v1.random_normal_initializer(), trainable=False
    )
    labels = v1.get_variable(
        "labels",
        [args.batch],
        tf.int32,
        initializer=v1.random_uniform_initializer(0, 1000, dtype=tf.int32),
        trainable=False,
    )
    logits = MODELS[args.model](tf, images)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    with tf.control_dependencies(v1.get_collection(v1.GraphKeys.UPDATE_OPS)):
        train = v1.train.MomentumOptimizer(0.01, 0.9).minimize(loss)
    config = v1.ConfigProto(intra_op_parallelism_threads=args.threads, inter_op_parallelism_threads=args.inter_op)
    with v1.Session(config=config) as sess:
        sess.run(v1.global_variables_initializer())
        for _ in range(args.warmup):
            sess.run(train)
        start = time.perf_counter()
        for _ in range(args.steps - 1):
            sess.run(train)
        _, last = sess.run([train, loss])
        elapsed = time.perf_counter() - start
    print(f"images_per_s={args.steps * args.batch / elapsed:.3f} loss={last:.4f} model={args.model} size={size}")


if __name__ == "__main__":
    main()
