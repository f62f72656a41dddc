"""What activation checkpointing costs and saves in the PyTorch and JAX Llama runners: for each
mode (none, selective, full), tokens/s and peak memory of llama_small's step on this CPU,
every configuration in a fresh process, the configurations alternating round by round so
that a shared host's load falls on all of them alike:

    .venvs/analysis/bin/python benchmarks/activation_checkpointing.py [--rounds 5] [--seq-len 1024] [--batch 2]

Tokens/s: the runner's steps after `--warmup` steps, timed over `--steps` steps (synced at the
window's ends). Memory: PyTorch, the growth of the process's peak resident set
(getrusage ru_maxrss) over its resident set once the runner is built: gradients, AdamW's
moments, activations and temporaries of the step (a CPU has no allocator statistics); JAX,
XLA's own account of the compiled step's temporaries (`memory_analysis().temp_size_in_bytes`:
exact, and free of the compiler's memory, which the resident set holds too). Prints every
process's figures and, per framework and mode, the median tokens/s, the median of its
per-round ratio to `none` with a 95 % bootstrap interval (dlbench.analysis.stats), and the
memory saved.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODES = ("none", "selective", "full")
ENV = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": "/tmp"}
MIB = 2**20


def measure(args) -> dict:
    """(In the framework's environment.) One configuration's step: tokens/s and memory."""
    import importlib
    import resource
    import time

    sys.path.insert(0, str(REPO))
    from dlbench.coords import RunCoords
    from dlbench.runners.base import RunSpec

    runner_class = importlib.import_module(f"dlbench.runners.{args.framework}").Runner
    coords = RunCoords(args.framework, args.model, "fp32", "synthetic", str(args.batch), "1x1", "single",
                       activation_checkpointing=args.mode, repeat=1)  # fmt: skip
    runner = runner_class(RunSpec(coords, args.batch, 0, args.seq_len, args.threads, "cpu"))
    runner.import_framework()
    runner.build()
    built = _resident_bytes()
    for _ in range(args.warmup):
        runner.loss_value(runner.step())
    start = time.perf_counter()
    for _ in range(args.steps):
        handle = runner.step()
    runner.sync()
    runner.loss_value(handle)
    seconds = time.perf_counter() - start
    record = {
        "framework": args.framework,
        "mode": args.mode,
        "tokens_per_s": args.batch * args.seq_len * args.steps / seconds,
        "peak_rss_growth": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - built,
    }
    if args.framework == "jax":
        record["step_temp_bytes"] = runner.step_fn.memory_analysis().temp_size_in_bytes
    return record


def _resident_bytes() -> int:
    import os

    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def run_one(args, framework: str, mode: str) -> dict:
    python = REPO / ".venvs" / framework / "bin" / "python"
    command = [str(python), __file__, "--measure", "--framework", framework, "--mode", mode]
    command += ["--model", args.model, "--batch", str(args.batch), "--seq-len", str(args.seq_len)]
    command += ["--steps", str(args.steps), "--warmup", str(args.warmup), "--threads", str(args.threads)]
    run = subprocess.run(command, cwd=REPO, env=ENV, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise SystemExit(f"{framework} {mode} failed: {run.stderr[-3000:]}")
    return json.loads(run.stdout.splitlines()[-1])


def summary(records: list[dict]) -> list[str]:
    """Per framework and mode: tokens/s, its ratio to `none` in the same round (paired: a
    round's processes ran minutes apart, under the same load), the memory saved against `none`."""
    sys.path.insert(0, str(REPO))
    from dlbench.analysis import stats

    lines = [
        "| framework | mode | tokens/s (median) | ÷ none, per round [95 % CI] | memory | saved vs none |",
        "|---|---|---|---|---|---|",
    ]
    for framework in dict.fromkeys(r["framework"] for r in records):
        by_mode = {m: [r for r in records if r["framework"] == framework and r["mode"] == m] for m in MODES}
        memory_key = "step_temp_bytes" if framework == "jax" else "peak_rss_growth"
        plain_memory = statistics.median(r[memory_key] for r in by_mode["none"])
        for mode, runs in by_mode.items():
            ratios = [r["tokens_per_s"] / p["tokens_per_s"] for r, p in zip(runs, by_mode["none"], strict=True)]
            low, high = stats.bootstrap_ci("median", ratios)
            memory = statistics.median(r[memory_key] for r in runs)
            saved = plain_memory - memory
            lines.append(
                f"| {framework} | {mode} | {statistics.median(r['tokens_per_s'] for r in runs):.0f} | "
                f"{statistics.median(ratios):.3f} [{low:.3f}, {high:.3f}] | "
                f"{memory / MIB:.0f} MiB | {saved / MIB:.0f} MiB ({saved / plain_memory:.0%}) |"
            )
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frameworks", nargs="+", default=["pytorch", "jax"], choices=("pytorch", "jax"))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--model", default="llama_small")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", help="also write every process's figures to this file")
    p.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--framework", help=argparse.SUPPRESS)
    p.add_argument("--mode", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.measure:
        print(json.dumps(measure(args)))
        return 0
    records = []
    for i in range(args.rounds):
        # Each round another order: a mode is first, middle and last as often (load drifts).
        modes = MODES[i % 3 :] + MODES[: i % 3]
        frameworks = args.frameworks if i % 2 == 0 else args.frameworks[::-1]
        for framework in frameworks:
            for mode in modes:
                records.append(run_one(args, framework, mode))
                memory = records[-1].get("step_temp_bytes", records[-1]["peak_rss_growth"])
                print(f"round {i + 1}: {framework} {mode}: {records[-1]['tokens_per_s']:.1f} tokens/s, "
                      f"{memory / MIB:.0f} MiB", flush=True)  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1))
    print("\n".join(summary(records)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
