"""Aggregation cost: N step logs of S steps each → runs and cells tables.

    .venvs/analysis/bin/python benchmarks/aggregation_cost.py [--runs 10000] [--steps 120]

Writes N synthetic raw logs with the real writer (in a temporary directory), then times
`dlbench.analysis.tables.build` (parse + validate every log, hash it, per-run throughput, per-cell
statistics with bootstrap CIs, speedup) — what the aggregate rule does. Target: ≤ 10 s for
10 000 logs of 120 steps on 2 cores.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dlbench.analysis import tables  # noqa: E402
from dlbench.coords import RunCoords  # noqa: E402
from dlbench.planning.grid import Grid  # noqa: E402
from dlbench.steplog import StepLogWriter, rank_log_name  # noqa: E402


def make_runs(n: int) -> list[RunCoords]:
    # 336 cells per repeat; repeats grow until there are n runs.
    axes = itertools.product(
        range(1, 1000),
        ["pytorch", "tensorflow", "mxnet"],
        ["resnet50", "vgg16", "alexnet", "resnet152"],
        ["fp32", "amp"],
        ["synthetic", "real"],
        ["1", "8", "16", "32", "64", "128", "256"],
    )
    return [RunCoords(fw, m, p, d, b, "1x1", "single", r) for r, fw, m, p, d, b in itertools.islice(axes, n)]


def write_logs(root: Path, runs: list[RunCoords], steps: int) -> None:
    for c in runs:
        writer = StepLogWriter(
            root / c.run_dir / rank_log_name(0),
            {
                "run": c.as_dict(),
                "rank": 0,
                "world_size": 1,
                "node": "n1",
                "framework": {"name": c.framework, "version": "x"},
            },
        )
        t = 0.0
        records = []
        for i in range(steps):
            records.append(
                {
                    "i": i,
                    "phase": "warmup" if i < 20 else "measure",
                    "t_start": t,
                    "t_end": t + 0.1,
                    "samples": 8,
                    "loss": 1.0,
                }
            )
            t += 0.1 + (c.repeat % 7) * 1e-4
        writer.write_steps(records)
        writer.close("ok")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=10_000)
    p.add_argument("--steps", type=int, default=120)
    args = p.parse_args()
    runs = make_runs(args.runs)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        write_logs(Path(tmp), runs, args.steps)
        t1 = time.perf_counter()
        protocol = {"preset": "caict2020", "warmup_steps": 20, "measured_steps": 100, "repeats": 3, "statistic": "mean"}
        run_table, cells = tables.build(Grid(runs=runs, unavailable={}, protocol=protocol), tmp)
        t2 = time.perf_counter()
    print(f"wrote {len(runs)} logs x {args.steps} steps in {t1 - t0:.1f} s")
    print(
        f"aggregation: {len(run_table)} runs -> {len(cells)} cells in {t2 - t1:.2f} s "
        f"({(t2 - t1) / len(runs) * 1e3:.2f} ms per log)"
    )


if __name__ == "__main__":
    main()
