"""The command line every baseline takes (benchmarks/harness_overhead.py passes these options)."""

from __future__ import annotations

import argparse


def baseline_arguments(
    description: str, models=None, threads: int = 0, threads_help: str = ""
) -> argparse.ArgumentParser:
    """--model --batch --image-size --steps --warmup --threads; a baseline adds its own after."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--model", default="resnet50", choices=sorted(models) if models else None)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=threads, help=threads_help or "intra-op threads; 0 = the default")
    return p
