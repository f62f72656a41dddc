"""The fastest plain eager PyTorch training loop known, as a yardstick for the dlbench runner.

    .venvs/pytorch/bin/python benchmarks/baselines/pytorch_eager.py \
        --model resnet50 --batch 8 --image-size 224 --steps 20 --warmup 5 --threads 2

Nothing of dlbench: a torchvision model (weights=None, 1000 classes) in channels-last memory
format, SGD lr 0.01 momentum 0.9 (foreach), cross-entropy, a synthetic batch created once,
`zero_grad(set_to_none=True)`, `torch.set_num_threads`, no per-step timing or host sync.
Prints images/s over the measured steps (wall clock around the measured loop; the final
`float(loss)` is outside it, but eager CPU ops are synchronous). pytorch_compiled.py reuses
this loop under `torch.compile`.
"""

from __future__ import annotations

import argparse
import time
from types import SimpleNamespace

from baseline_args import baseline_arguments

IMAGE_CLASSES = 1000
# inception_v3: no auxiliary head (a training-time regulariser the seed figures leave out).
MODEL_KWARGS = {"inception_v3": {"aux_logits": False, "init_weights": True}}


def parse_args(description: str, extra=None) -> argparse.Namespace:
    p = baseline_arguments(description, None, 0, "intra-op threads; 0 = PyTorch's default")
    if extra:
        extra(p)
    return p.parse_args()


def build(args) -> SimpleNamespace:
    """torch, the model, optimizer, loss function and the synthetic batch (created once)."""
    import torch
    import torchvision

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    builder = getattr(torchvision.models, args.model)
    model = builder(weights=None, num_classes=IMAGE_CLASSES, **MODEL_KWARGS.get(args.model, {}))
    model = model.to(memory_format=torch.channels_last).train()
    size = args.image_size
    return SimpleNamespace(
        torch=torch,
        model=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=True),
        loss_fn=torch.nn.CrossEntropyLoss(),
        images=torch.randn(args.batch, 3, size, size).contiguous(memory_format=torch.channels_last),
        labels=torch.randint(0, IMAGE_CLASSES, (args.batch,)),
    )


def train_step_of(t: SimpleNamespace, forward=None, optimizer_step=None):
    """The textbook step; `forward` / `optimizer_step` replace the model call / optimizer.step."""
    forward = t.model if forward is None else forward
    optimizer_step = t.optimizer.step if optimizer_step is None else optimizer_step

    def train_step():
        t.optimizer.zero_grad(set_to_none=True)
        loss = t.loss_fn(forward(t.images), t.labels)
        loss.backward()
        optimizer_step()
        return loss

    return train_step


def measure(train_step, args) -> tuple[float, float, float]:
    """At least one warm-up step, then the measured ones: (first step's s, measured s, last loss)."""
    start = time.perf_counter()
    loss = train_step()
    first_step = time.perf_counter() - start
    for _ in range(max(args.warmup, 1) - 1):
        train_step()
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = train_step()
    elapsed = time.perf_counter() - start
    return first_step, elapsed, loss.detach().item()


def report(torch, args, label: str, elapsed: float, loss: float, extra: str = "") -> None:
    print(
        f"pytorch {torch.__version__} {label} {args.model} batch {args.batch} {args.image_size} px threads "
        f"{torch.get_num_threads()}: {args.steps * args.batch / elapsed:.2f} images/s "
        f"({elapsed / args.steps:.3f} s/step, loss {loss:.4f}{extra})",
        flush=True,
    )


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    training = build(args)
    _, elapsed, loss = measure(train_step_of(training), args)
    report(training.torch, args, "eager", elapsed, loss)


if __name__ == "__main__":
    main()
