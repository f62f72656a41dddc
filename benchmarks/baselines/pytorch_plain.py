"""The plainest fast PyTorch training loop, to check that the dlbench runner costs nothing.

    .venvs/pytorch/bin/python benchmarks/baselines/pytorch_plain.py \
        --model resnet50 --batch 8 --image-size 64 --steps 20 --warmup 5 --threads 2

Same model (torchvision, weights=None, 1000 classes), batch, image size, optimizer (SGD lr
0.01 momentum 0.9, cross-entropy) and memory format (channels-last) as the dlbench PyTorch
runner, with nothing of dlbench: a synthetic batch created once, the textbook loop, no
per-step timing. Prints images/s over the measured steps: wall clock around the measured
loop.
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="resnet50")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=0)
    args = p.parse_args()

    import torch
    import torchvision

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    kwargs = {"aux_logits": False, "init_weights": True} if args.model == "inception_v3" else {}
    model = getattr(torchvision.models, args.model)(weights=None, num_classes=1000, **kwargs)
    model = model.to(memory_format=torch.channels_last).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=True)
    loss_fn = torch.nn.CrossEntropyLoss()
    images = torch.randn(args.batch, 3, args.image_size, args.image_size).contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (args.batch,))

    def train_step():
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(images), labels)
        loss.backward()
        optimizer.step()
        return loss

    for _ in range(args.warmup):
        train_step()
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = train_step()
    elapsed = time.perf_counter() - start
    print(
        f"pytorch {torch.__version__} {args.model} batch {args.batch} {args.image_size} px threads "
        f"{torch.get_num_threads()}: {args.steps * args.batch / elapsed:.2f} images/s "
        f"({elapsed / args.steps:.3f} s/step, loss {float(loss):.4f})"
    )


if __name__ == "__main__":
    main()
