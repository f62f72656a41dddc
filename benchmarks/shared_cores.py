"""OpenMP's wait policy when framework processes share cores, as the test suite's two workers do.

    .venvs/analysis/bin/python benchmarks/shared_cores.py [--rounds 3] [--concurrent 1 2]

Starts `--concurrent` PyTorch runs at once (ResNet-50, batch 4, 32 px, 2 threads each, 1 + 15
steps, through `python -m dlbench.launch`), alternating OpenMP's default (active) wait with
`OMP_WAIT_POLICY=PASSIVE` every round, and prints each arm's wall time and measured step time
(median over rounds) with the load average. tests/conftest.py sets the passive policy for every
process the suite starts (docs/testing.md); nothing else in dlbench sets it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYTHON = Path(os.environ.get("DLBENCH_VENVS", REPO / ".venvs")) / "pytorch" / "bin" / "python"
ARMS = {"default": {}, "passive": {"OMP_WAIT_POLICY": "PASSIVE"}}


def command(run_dir: str) -> list[str]:
    return [
        str(PYTHON), "-m", "dlbench.launch", "--framework", "pytorch", "--model", "resnet50",
        "--precision", "fp32", "--data", "synthetic", "--batch", "4", "--scale", "1x1",
        "--strategy", "single", "--repeat", "1", "--run-dir", run_dir, "--preset", "caict2020",
        "--warmup-steps", "1", "--measured-steps", "15", "--statistic", "mean",
        "--image-size", "32", "--threads", "2", "--time-limit", "600",
        "--env-lock", str(REPO / "envs/pytorch.txt"),
    ]  # fmt: skip


def measured_step_seconds(run_dir: str) -> float:
    records = [json.loads(line) for line in Path(run_dir, "rank0.steps.jsonl").read_text().splitlines()]
    steps = [r["t_end"] - r["t_start"] for r in records if r.get("phase") == "measure"]
    if records[-1].get("status") != "ok" or not steps:
        raise RuntimeError(f"{run_dir}: the run did not end ok: {records[-1]}")
    return statistics.median(steps)


def concurrent_runs(count: int, extra_env: dict) -> tuple[float, float]:
    """Wall seconds for `count` runs started together, and their median measured step time."""
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", **extra_env}
    dirs = [str(Path(tempfile.mkdtemp(prefix="shared-cores-")) / "run") for _ in range(count)]
    started = time.perf_counter()
    procs = [subprocess.Popen(command(d), cwd=REPO, env=env, stdout=subprocess.DEVNULL) for d in dirs]
    if any(p.wait() for p in procs):
        raise RuntimeError("a run failed")
    return time.perf_counter() - started, statistics.median(measured_step_seconds(d) for d in dirs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrent", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    for count in args.concurrent:
        seen: dict[str, list[tuple[float, float]]] = {arm: [] for arm in ARMS}
        for round_ in range(args.rounds):
            order = list(ARMS) if round_ % 2 == 0 else list(reversed(ARMS))
            for arm in order:
                seen[arm].append(concurrent_runs(count, ARMS[arm]))
        for arm, results in seen.items():
            wall = statistics.median(r[0] for r in results)
            step = statistics.median(r[1] for r in results)
            print(f"{count} concurrent, {arm:8s}: wall {wall:6.1f} s, step {step:.3f} s (median of {args.rounds})")
        print(f"   load average now {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
