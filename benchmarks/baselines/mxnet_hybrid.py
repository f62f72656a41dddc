"""The plainest fast MXNet Gluon training loop, to check that the dlbench runner costs nothing.

    .venvs/mxnet/bin/python benchmarks/baselines/mxnet_plain.py \
        --model resnet50 --batch 8 --image-size 64 --steps 20 --warmup 5 --threads 2

Same model (gluon.model_zoo.vision, pretrained=False, 1000 classes; ResNets with the
down-sampling stride on the 3x3 conv, i.e. v1.5, as the dlbench runner builds them; `--stride-on
1x1` gives the model zoo's stock v1), batch, image size and optimizer (SGD lr 0.01 momentum
0.9, softmax cross-entropy) as the dlbench MXNet runner, with nothing of dlbench: the textbook
Gluon loop (hybridize(static_alloc, static_shape), autograd.record, backward,
trainer.step(batch)), a synthetic batch created once, no per-step sync: MXNet's engine may
overlap consecutive steps, one `waitall()` at the end.

Prints images/s over the measured steps: wall clock around the measured loop (after
`--warmup` steps, followed by a waitall) up to the final waitall.
"""

from __future__ import annotations

import argparse
import os
import time

ZOO = {
    "resnet50": "resnet50_v1",
    "resnet152": "resnet152_v1",
    "vgg16": "vgg16",
    "inception_v3": "inception_v3",
    "alexnet": "alexnet",
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="resnet50", choices=sorted(ZOO))
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=0, help="OpenMP threads per operator; 0 = MXNet's default")
    p.add_argument("--stride-on", default="3x3", choices=["3x3", "1x1"], help="ResNet down-sampling stride")
    args = p.parse_args()

    if args.threads:  # read by MXNet at import
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import mxnet as mx
    from mxnet import autograd, gluon
    from mxnet.gluon.model_zoo import vision

    mx.random.seed(0)
    ctx = mx.cpu()
    net = getattr(vision, ZOO[args.model])(pretrained=False, classes=1000)
    if args.model.startswith("resnet") and args.stride_on == "3x3":
        for stage in net.features:
            for block in getattr(stage, "_children", {}).values():
                body = getattr(block, "body", None)
                if body is not None and len(body) == 8 and tuple(body[0]._kwargs["stride"]) != (1, 1):
                    body[3]._kwargs["stride"], body[0]._kwargs["stride"] = body[0]._kwargs["stride"], (1, 1)
    net.initialize(mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2), ctx=ctx)
    net.hybridize(static_alloc=True, static_shape=True)
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
