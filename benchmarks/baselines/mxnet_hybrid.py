"""The fastest plain MXNet training loop known: hybridized Gluon, static memory, as a yardstick.

    .venvs/mxnet/bin/python benchmarks/baselines/mxnet_hybrid.py \
        --model resnet50 --batch 8 --image-size 224 --steps 20 --warmup 5 --threads 2

Nothing of dlbench. gluon.model_zoo.vision models (pretrained=False, 1000 classes; resnet50_v1
/ resnet152_v1 with the down-sampling stride moved to the 3x3 conv, i.e. v1.5, the same
network as the dlbench runner and torchvision train; `--stride-on 1x1` gives the zoo's stock
v1; inception_v3's final pool made global so that it builds below 299 px), SGD lr 0.01
momentum 0.9, softmax cross-entropy, He init (Glorot for VGG-16/AlexNet, which diverge under
He). The loop: `hybridize(static_alloc=True, static_shape=True)` (one cached graph, memory
planned once), a synthetic batch created once on the context, autograd.record, backward,
trainer.step(batch), and no host sync inside the loop: MXNet's engine overlaps consecutive
steps; one `waitall()` closes the warm-up and one the measured window.

Prints images/s over the measured steps: wall clock from after the warm-up's waitall to the
measured window's waitall.
"""

from __future__ import annotations

import argparse
import os
import time

from baseline_args import baseline_arguments

ZOO = {
    "resnet50": "resnet50_v1",
    "resnet152": "resnet152_v1",
    "vgg16": "vgg16",
    "inception_v3": "inception_v3",
    "alexnet": "alexnet",
}


def parse_args() -> argparse.Namespace:
    p = baseline_arguments(__doc__.splitlines()[0], ZOO, 0, "OpenMP threads per operator; 0 = MXNet's default")
    p.add_argument("--stride-on", default="3x3", choices=["3x3", "1x1"], help="ResNet down-sampling stride")
    return p.parse_args()


def build_net(mx, gluon, args):
    """The model-zoo network, adjusted as the module docstring says, initialised and hybridized."""
    from mxnet.gluon.model_zoo import vision

    net = getattr(vision, ZOO[args.model])(pretrained=False, classes=1000)
    if args.model.startswith("resnet") and args.stride_on == "3x3":
        for stage in net.features:
            for block in getattr(stage, "_children", {}).values():
                body = getattr(block, "body", None)
                if body is not None and len(body) == 8 and tuple(body[0]._kwargs["stride"]) != (1, 1):
                    body[3]._kwargs["stride"], body[0]._kwargs["stride"] = body[0]._kwargs["stride"], (1, 1)
    if args.model == "inception_v3":
        children = net.features._children
        for key, block in children.items():
            if isinstance(block, gluon.nn.AvgPool2D) and tuple(block._kwargs["kernel"]) == (8, 8):
                children[key] = gluon.nn.GlobalAvgPool2D()  # identical at 299 px
    if args.model in ("vgg16", "alexnet"):
        init = mx.init.Xavier()
    else:
        init = mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2)
    net.initialize(init, ctx=mx.cpu())
    net.hybridize(static_alloc=True, static_shape=True)
    return net


def main() -> None:
    args = parse_args()
    if args.threads:  # read by MXNet at import
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import mxnet as mx
    from mxnet import autograd, gluon

    mx.random.seed(0)
    ctx = mx.cpu()
    net = build_net(mx, gluon, args)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.01, "momentum": 0.9})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    size = args.image_size
    images = mx.nd.random.normal(shape=(args.batch, 3, size, size), ctx=ctx)
    labels = mx.nd.random.randint(0, 1000, shape=(args.batch,), ctx=ctx).astype("float32")

    def train_step():
        with autograd.record():
            loss = loss_fn(net(images), labels)
        loss.backward()
        trainer.step(args.batch)
        return loss

    for _ in range(args.warmup):
        train_step()
    mx.nd.waitall()
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = train_step()
    mx.nd.waitall()
    elapsed = time.perf_counter() - start
    print(
        f"mxnet {mx.__version__} {args.model} batch {args.batch} {size} px threads "
        f"{os.environ.get('OMP_NUM_THREADS', 'default')}: {args.steps * args.batch / elapsed:.2f} images/s "
        f"({elapsed / args.steps:.3f} s/step, loss {float(loss.mean().asscalar()):.4f})"
    )


if __name__ == "__main__":
    main()
