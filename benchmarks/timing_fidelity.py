"""Timing fidelity: throughput from the step records vs samples ÷ wall clock measured outside.

    .venvs/<framework>/bin/python benchmarks/timing_fidelity.py --framework pytorch \
        [--model resnet50] [--batch 8] [--image-size 64] [--warmup 5] [--steps 30] [--rounds 3]
    .venvs/mxnet/bin/python benchmarks/timing_fidelity.py --framework mxnet \
        --sync-modes waitall loss --plain [--short-steps 3] [--lead 2] ...

Builds the framework's dlbench runner in this process, runs the warm-up through the one
timing loop (dlbench.launch.worker.time_steps), then, per round, times blocks of the loop with a
wall clock outside it and compares the throughput computed from the block's step records
(what the aggregator reports) with measured samples ÷ that wall time. Target: within 1 %.
Run it with the framework environment's Python.

Asynchronous engines (MXNet with `--sync-modes`): a `sync()` that waits only for part of a
step (MXNet's "loss" mode: the loss, not the step's trailing backward and update) leaves
work in flight at the window's edges, so a single outside wall clock (which must drain the
engine at its end) always holds one partial step more than any window of step records.
Such blocks are therefore measured by difference: each round runs a long block (`--lead`
unrecorded steps, then `--steps` recorded) and a short one (`--lead`, then `--short-steps`),
each bracketed by a full drain (`mx.nd.waitall()`), so that fill and drain cancel in
wall(long) − wall(short) = the time of `steps − short_steps` steady-state steps; that is
compared with the per-step time of the long block's records (its `steps` measured steps,
after the lead, exactly the worker's window). `--plain` adds, per round, a block of the
same steps with no timing loop at all (`runner.step()` back to back, one drain at the end,
timed outside): records ÷ plain is the timing loop's overhead with the model, batch and
process held fixed (the in-process counterpart of harness_overhead.py). The order of the
blocks rotates from round to round; medians and ranges are printed.
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
from dlbench.launch.worker import time_steps  # noqa: E402
from dlbench.runners import framework_module  # noqa: E402
from dlbench.runners.base import RunSpec  # noqa: E402

clock = time.perf_counter


def drain(runner) -> None:
    """Wait for every queued operator (MXNet: the whole engine), not only what sync() waits for."""
    mx = getattr(runner, "mx", None)
    if mx is not None:
        mx.nd.waitall()
    else:
        runner.sync()


def window_throughput(steps: list[dict]) -> float:
    measured = [s for s in steps if s["phase"] == "measure"]
    return sum(s["samples"] for s in measured) / (measured[-1]["t_end"] - measured[0]["t_start"])


def timed_block(runner, lead: int, steps: int) -> tuple[list[dict], float]:
    drain(runner)
    start = clock()
    records = time_steps(runner, lead, steps, 0, 0)
    drain(runner)
    return records, clock() - start


def plain_block(runner, lead: int, steps: int) -> float:
    """runner.step() back to back, no timing loop and no per-step sync: samples/s."""
    for _ in range(lead):
        runner.step(runner.next_batch())
    drain(runner)
    start = clock()
    for _ in range(steps):
        runner.step(runner.next_batch())
    drain(runner)
    return steps * runner.spec.batch * runner.spec.local_devices / (clock() - start)


def summary(values: list[float], pct: bool = True) -> str:
    f = (lambda v: f"{v:+.3%}") if pct else (lambda v: f"{v:.3f}")
    return f"median {f(statistics.median(values))} (min {f(min(values))}, max {f(max(values))}, n={len(values)})"


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
    p.add_argument("--sync-modes", nargs="+", default=None, help="MXNet: Runner.sync_mode values to compare")
    p.add_argument("--short-steps", type=int, default=3, help="measured steps of the short block (sync modes)")
    p.add_argument("--lead", type=int, default=2, help="unrecorded steps opening each block (sync modes)")
    p.add_argument("--plain", action="store_true", help="add a plain block per round (overhead ratio)")
    args = p.parse_args()
    coords = RunCoords(args.framework, args.model, "fp32", "synthetic", str(args.batch), "1x1", "single", 1)
    spec = RunSpec(
        coords=coords, batch=args.batch, image_size=args.image_size, seq_len=0, threads=args.threads, device="cpu"
    )
    runner = framework_module(args.framework).Runner(spec)
    runner.import_framework()
    runner.build()
    time_steps(runner, args.warmup, 0, 0, 0)

    if not args.sync_modes:
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
        return

    blocks = (["plain"] if args.plain else []) + list(args.sync_modes)
    fidelity: dict[str, list[float]] = {m: [] for m in args.sync_modes}
    ratio: dict[str, list[float]] = {m: [] for m in args.sync_modes}
    speed: dict[str, list[float]] = {b: [] for b in blocks}
    for r in range(args.rounds):
        shift = r % len(blocks)
        result = {}
        for block in blocks[shift:] + blocks[:shift]:
            if block == "plain":
                result[block] = plain_block(runner, args.lead, args.steps)
                continue
            runner.sync_mode = block
            records, wall_long = timed_block(runner, args.lead, args.steps)
            _, wall_short = timed_block(runner, args.lead, args.short_steps)
            outside = (args.steps - args.short_steps) * args.batch / (wall_long - wall_short)
            result[block] = window_throughput(records)
            fidelity[block].append(result[block] / outside - 1)
        line = [f"round {r + 1}:"]
        for block in blocks:
            speed[block].append(result[block])
            text = f"{block} {result[block]:.3f} img/s"
            if block != "plain":
                text += f" (records vs outside {fidelity[block][-1]:+.2%}"
                if args.plain:
                    ratio[block].append(result[block] / result["plain"])
                    text += f", ÷ plain {ratio[block][-1]:.3f}"
                text += ")"
            line.append(text)
        print(" ".join(line), flush=True)
    head = f"{args.framework} {args.model} bs{args.batch} {args.image_size}px, {args.steps} steps/block"
    for block in blocks:
        print(f"{head}: {block} img/s {summary(speed[block], pct=False)}")
    for mode in args.sync_modes:
        print(f"{head}: sync {mode}: records vs outside wall clock (by difference) {summary(fidelity[mode])}")
        if args.plain:
            print(f"{head}: sync {mode}: records ÷ plain {summary(ratio[mode], pct=False)}")


if __name__ == "__main__":
    main()
