"""Timing fidelity: throughput from the step records vs samples ÷ wall clock measured outside.

    .venvs/<framework>/bin/python benchmarks/timing_fidelity.py --framework pytorch \
        [--model resnet50] [--batch 8] [--image-size 64] [--warmup 5] [--steps 30] [--rounds 3]

Builds the framework's dlbench runner in this process, runs the warm-up through the one
timing loop (dlbench.worker.time_steps), then times a second call of the loop — the
measured window — with a wall clock outside it, and compares the throughput computed from
its step records (what the aggregator reports) with measured samples ÷ that wall time.
Target: within 1 %. Run it with the framework environment's Python.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dlbench.coords import RunCoords  # noqa: E402
from dlbench.runners import framework_module  # noqa: E402
from dlbench.runners.base import RunSpec  # noqa: E402
from dlbench.worker import time_steps  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--framework", default="pytorch")
    p.add_argument("--model", default="resnet50")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    coords = RunCoords(args.framework, args.model, "fp32", "synthetic", str(args.batch), "1x1", "single", 1)
    spec = RunSpec(
        coords=coords, batch=args.batch, image_size=args.image_size, seq_len=0, threads=args.threads, device="cpu"
    )
    runner = framework_module(args.framework).Runner(spec)
    runner.import_framework()
    runner.build()
    time_steps(runner, args.warmup, 0, 0, 0)
    errors = []
    for r in range(args.rounds):
        wall_start = time.perf_counter()
        steps = time_steps(runner, 0, args.steps, 0, 0)
        wall = time.perf_counter() - wall_start
        samples = sum(s["samples"] for s in steps)
        from_records = samples / (steps[-1]["t_end"] - steps[0]["t_start"])
        from_wall = samples / wall
        errors.append(from_records / from_wall - 1)
        print(
            f"round {r + 1}: step records {from_records:.3f} img/s, outside wall clock {from_wall:.3f} img/s, "
            f"difference {errors[-1]:+.3%}",
            flush=True,
        )
    print(
        f"{args.framework} {args.model}: records vs wall clock, median difference "
        f"{statistics.median(errors):+.3%} (max |diff| {max(abs(e) for e in errors):.3%})"
    )


if __name__ == "__main__":
    main()
