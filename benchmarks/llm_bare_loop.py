"""A bare PyTorch training loop of the runner's Llama, as a yardstick for the dlbench harness
on LLMs (issue #27):

    PYTHONPATH=. .venvs/pytorch/bin/python benchmarks/llm_bare_loop.py \
        --model llama_small --batch 2 --seq-len 128 --steps 10 --warmup 2 --threads 2

The model, tokens, loss and AdamW are the runner's (dlbench/runners/pytorch/llm.py): what
this leaves out is the harness (launcher, worker, per-step sync and clock, step log), so its
tokens/s against a dlbench run of the same settings is the harness's cost on an LLM step. It
is not in benchmarks/baselines/, whose loops share nothing with the runners and take the
CNN command line of harness_overhead.py. Prints tokens/s over the measured steps.
"""

from __future__ import annotations

import argparse
import time


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="llama_small")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast (the runner's amp)")
    return p.parse_args()


def main() -> None:
    import contextlib
    from types import SimpleNamespace

    import torch

    from dlbench.runners.pytorch import llm

    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    model = llm.Llama(args.model).train()
    optimizer, schedule = llm.optimizer(model.parameters(), compiled=False)
    spec = SimpleNamespace(
        coords=SimpleNamespace(model=args.model),
        batch=args.batch,
        local_devices=1,
        seq_len=args.seq_len,
        dist=SimpleNamespace(world_size=1, rank=0),
    )
    tokens = llm.tokens(spec, torch.Generator().manual_seed(1))

    def step():
        optimizer.zero_grad(set_to_none=True)
        autocast = torch.autocast("cpu", dtype=torch.bfloat16) if args.bf16 else contextlib.nullcontext()
        with autocast:
            loss = llm.loss(model, tokens)
        loss.backward()
        optimizer.step()
        schedule.step()
        return loss

    for _ in range(args.warmup):
        step()
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    elapsed = time.perf_counter() - start
    print(
        f"pytorch {torch.__version__} bare loop {args.model} batch {args.batch} seq {args.seq_len} threads "
        f"{torch.get_num_threads()}: {args.steps * args.batch * args.seq_len / elapsed:.1f} tokens/s "
        f"({elapsed / args.steps:.3f} s/step, loss {loss.item():.4f})",
        flush=True,
    )


if __name__ == "__main__":
    main()
