"""The plain PaddlePaddle training loops, as a yardstick for the dlbench runner.

    .venvs/paddle/bin/python benchmarks/baselines/paddle_static.py \
        --model resnet50 --batch 8 --image-size 224 --steps 20 --warmup 5 --threads 2 [--mode static]

Nothing of dlbench: a paddle.vision model (1000 classes), Momentum lr 0.01 momentum 0.9,
cross-entropy, a synthetic NCHW batch created once, OMP_NUM_THREADS=threads. `--mode`:
  static     (default) the static-graph program (paddle.enable_static, one Executor.run per step,
             the same host batch fed each step, no fetch but the last), the loop of Paddle's own
             benchmarks up to 2.x (seed 002);
  to_static  the dynamic-graph loop with the model under paddle.jit.to_static(full_graph=True);
  dynamic    the plain dynamic-graph loop.
Prints images/s over the measured steps, wall and CPU seconds per step (the CPU figure is less
sensitive to other processes on a shared machine), and the first step's seconds. paddle_dynamic.py is the
dynamic mode as a baseline file of its own (harness_overhead.py runs each file with the common
options only and takes the fastest).
"""

from __future__ import annotations

import os
import time

from baseline_args import baseline_arguments

IMAGE_CLASSES = 1000


def static_step(args, paddle, models, batch):
    """One Executor.run per step of the static program; the loss fetched on the last only."""
    paddle.enable_static()
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        images = paddle.static.data("images", batch[0].shape, "float32")
        labels = paddle.static.data("labels", batch[1].shape, "int64")
        model = getattr(models, args.model)(num_classes=IMAGE_CLASSES)
        loss = paddle.nn.functional.cross_entropy(model(images), labels)
        paddle.optimizer.Momentum(learning_rate=0.01, momentum=0.9).minimize(loss)
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    feed = {"images": batch[0], "labels": batch[1]}

    def step(last: bool = False):
        return exe.run(main, feed=feed, fetch_list=[loss] if last else [])

    return step


def dynamic_step(args, paddle, models, batch, to_static: bool):
    model = getattr(models, args.model)(num_classes=IMAGE_CLASSES)
    optimizer = paddle.optimizer.Momentum(learning_rate=0.01, momentum=0.9, parameters=model.parameters())
    if to_static:
        model = paddle.jit.to_static(model, full_graph=True)
    model.train()
    images, labels = paddle.to_tensor(batch[0]), paddle.to_tensor(batch[1])

    def step(last: bool = False):
        loss = paddle.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
        return [loss.numpy()] if last else []

    return step


def main(default_mode: str = "static") -> None:
    p = baseline_arguments(__doc__.splitlines()[0], None, 0, "OpenMP threads; 0 = Paddle's default")
    p.add_argument("--mode", choices=("static", "to_static", "dynamic"), default=default_mode)
    args = p.parse_args()
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import numpy as np
    import paddle
    from paddle.vision import models

    rng = np.random.default_rng(0)
    size = (args.batch, 3, args.image_size, args.image_size)
    batch = (rng.standard_normal(size, dtype=np.float32), rng.integers(0, IMAGE_CLASSES, args.batch).astype(np.int64))
    if args.mode == "static":
        step = static_step(args, paddle, models, batch)
    else:
        step = dynamic_step(args, paddle, models, batch, args.mode == "to_static")
    start = time.perf_counter()
    step(last=True)
    first_step = time.perf_counter() - start
    for _ in range(max(args.warmup, 1) - 1):
        step()
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(args.steps - 1):
        step()
    (loss,) = step(last=True)  # the host copy waits for the step (CPU kernels are synchronous)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    print(
        f"paddle {paddle.__version__} {args.mode} {args.model} batch {args.batch} {args.image_size} px threads "
        f"{os.environ.get('OMP_NUM_THREADS', 'default')}: {args.steps * args.batch / elapsed:.2f} images/s "
        f"({elapsed / args.steps:.3f} s/step, CPU {cpu / args.steps:.3f} s/step, "
        f"loss {float(np.asarray(loss).reshape(-1)[0]):.4f}, "
        f"first step {first_step:.1f} s)",
        flush=True,
    )


if __name__ == "__main__":
    main()
