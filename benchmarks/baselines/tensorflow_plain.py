"""The plainest fast TensorFlow training loop, to check that the dlbench runner costs nothing.

    .venvs/tensorflow/bin/python benchmarks/baselines/tensorflow_plain.py \
        --model resnet50 --batch 8 --image-size 64 --steps 20 --warmup 5 --threads 2

Same model (keras.applications, weights=None, 1000 classes, logits), batch, image size and
optimizer (SGD lr 0.01 momentum 0.9, softmax cross-entropy) as the dlbench TensorFlow
runner, with nothing of dlbench: no per-step timestamps or device sync.

  --loop fit       model.compile + model.fit on a repeated in-memory synthetic batch
                   (Keras's own train_function; XLA off, as Keras chooses on a CPU).
  --loop function  a tf.function train step (GradientTape + optimizer.apply_gradients)
                   called --steps times; one `.numpy()` at the end.

Prints images/s over the measured steps: wall clock around the measured loop after
`--warmup` steps (which include tracing).
"""

from __future__ import annotations

import argparse
import os
import time

APPLICATIONS = {"resnet50": "ResNet50", "resnet152": "ResNet152", "vgg16": "VGG16", "inception_v3": "InceptionV3"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="resnet50", choices=sorted(APPLICATIONS))
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=0, help="intra-op threads; 0 = TensorFlow's default")
    p.add_argument("--inter-op", type=int, default=0, help="inter-op threads; 0 = TensorFlow's default")
    p.add_argument("--loop", default="function", choices=["function", "fit"])
    args = p.parse_args()

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    import keras
    import tensorflow as tf

    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    if args.inter_op:
        tf.config.threading.set_inter_op_parallelism_threads(args.inter_op)
    keras.utils.set_random_seed(0)

    size = args.image_size
    model = getattr(keras.applications, APPLICATIONS[args.model])(
        weights=None, classes=1000, input_shape=(size, size, 3), classifier_activation=None
    )
    optimizer = keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)
    images = tf.random.normal([args.batch, size, size, 3])
    labels = tf.random.uniform([args.batch], 0, 1000, dtype=tf.int32)

    if args.loop == "fit":
        model.compile(
            optimizer=optimizer,
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            jit_compile=False,
        )
        data = tf.data.Dataset.from_tensors((images, labels)).repeat().prefetch(tf.data.AUTOTUNE)
        model.fit(data, steps_per_epoch=args.warmup, epochs=1, verbose=0)
        start = time.perf_counter()
        history = model.fit(data, steps_per_epoch=args.steps, epochs=1, verbose=0)
        elapsed = time.perf_counter() - start
        loss = history.history["loss"][-1]
    else:

        @tf.function
        def train_step():
            with tf.GradientTape() as tape:
                logits = model(images, training=True)
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        for _ in range(args.warmup):
            loss = train_step()
        loss.numpy()
        start = time.perf_counter()
        for _ in range(args.steps):
            loss = train_step()
        loss = float(loss.numpy())
        elapsed = time.perf_counter() - start

    print(
        f"tensorflow_plain loop={args.loop} model={args.model} batch={args.batch} size={size} "
        f"threads={args.threads} steps={args.steps} loss={loss:.4f} "
        f"images_per_s={args.batch * args.steps / elapsed:.2f}"
    )


if __name__ == "__main__":
    main()
