"""The cost estimate's error: dlbench.planning.cost's device-hours and raw-log bytes for a grid,
beside what a pipeline run of that grid measured.

    .venvs/analysis/bin/python benchmarks/cost_estimate.py --workdir DIR [--configfile FILE]
    .venvs/analysis/bin/python benchmarks/cost_estimate.py --timing

Run the grid first, into a working directory of its own:

    bash tools/run.sh --directory DIR                                        # config/config.yaml
    .venvs/analysis/bin/snakemake --profile profiles/local --configfile config/grids/llm_cpu.yaml -d DIR

Prints per cell the estimated and the measured step time (median of its runs' medians) and run
time (header start to footer end), then the totals: estimated device-hours ÷ measured
(`cost.measured_device_hours`) and raw-log bytes ÷ the bytes of the step logs and launch.json
files under DIR/results/runs. `--timing`: the seconds `cost.estimate` takes on the 10 000-run
grid of benchmarks/dag_cost.py (median of 5 rounds, its caches cleared), beside expanding it.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dlbench.analysis.columns import col, read_runs  # noqa: E402
from dlbench.planning import cost  # noqa: E402
from dlbench.planning.config import checked_grid, resolve_files  # noqa: E402

CELL_COLUMNS = [col.framework, col.model, col.precision, col.data, col.batch, col.scale, col.strategy]


def compare(workdir: Path, configfile: str) -> None:
    config = resolve_files([str(REPO / configfile)])
    grid = checked_grid(config)
    estimate = cost.estimate(grid, config, REPO)
    runs = read_runs(workdir / "results" / "tables" / "runs.csv")
    steps = grid.protocol["warmup_steps"] + grid.protocol["measured_steps"]
    print(f"{configfile}: {len(grid.runs)} runs in {len(estimate.cells)} cells, {steps} steps a run")
    print(*estimate.summary_lines(), sep="\n")
    print(f"{'cell':58} {'step s est':>10} {'measured':>9} {'run s est':>9} {'measured':>9}")
    by_cell = {key: group for key, group in runs.groupby(CELL_COLUMNS)}
    for cell_cost in estimate.cells:
        cell = cell_cost.cell
        group = by_cell.get(tuple(str(getattr(cell, name)) for name in CELL_COLUMNS))
        if group is None or cell_cost.step_s is None:
            continue
        run_s = steps * cell_cost.step_s + cost.STARTUP_S[estimate.kind]
        held_s = cost.measured_device_hours(group, workdir) * 3600 / group[col.devices].sum()
        name = f"{cell.framework} {cell.model} {cell.precision} {cell.data} {cell.scale} {cell.strategy}"
        measured_step = group[col.step_time_median_s].median()
        print(f"{name:58} {cell_cost.step_s:10.3f} {measured_step:9.3f} {run_s:9.1f} {held_s:9.1f}")
    measured = cost.measured_device_hours(runs, workdir)
    written = sum(
        p.stat().st_size
        for p in (workdir / "results" / "runs").rglob("*")
        if p.name.endswith(".steps.jsonl") or p.name == "launch.json"
    )
    print(
        f"device-hours: estimated {estimate.device_hours:.4f}, measured {measured:.4f} {estimate.unit}"
        f" ({len(runs)} runs): error {estimate.device_hours / measured - 1:+.0%}"
    )
    print(
        f"raw logs: estimated {estimate.log_bytes} bytes, written {written} bytes:"
        f" error {estimate.log_bytes / written - 1:+.0%}"
    )


def timing(rounds: int = 5) -> None:
    sys.path.insert(0, str(REPO / "benchmarks"))
    from dag_cost import BIG

    expand_s, estimate_s = [], []
    for _ in range(rounds):
        config = copy.deepcopy(BIG)
        started = time.perf_counter()
        grid = checked_grid(config)
        expanded = time.perf_counter()
        cost.cell_step.cache_clear()
        cost.campaign_step_times.cache_clear()
        cost.estimate(grid, config, REPO)
        estimate_s.append(time.perf_counter() - expanded)
        expand_s.append(expanded - started)
    print(
        f"{len(grid.runs)} runs: checked_grid {statistics.median(expand_s):.3f} s,"
        f" cost.estimate {statistics.median(estimate_s):.3f} s (median of {rounds})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, help="a working directory the grid ran in")
    parser.add_argument("--configfile", default="config/config.yaml", help="the grid file it ran")
    parser.add_argument("--timing", action="store_true", help="time estimating the 10 000-run grid")
    args = parser.parse_args()
    if args.workdir:
        compare(args.workdir, args.configfile)
    if args.timing:
        timing()


if __name__ == "__main__":
    main()
