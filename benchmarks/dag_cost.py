"""DAG cost: `snakemake -n` of the CAICT 2020 grid and of a 10 000-run grid, each as a ratio
to the trivial floor — a one-rule workflow with the same number of jobs.

    .venvs/analysis/bin/python benchmarks/dag_cost.py [--repeats 3] [--grid caict2020|10k] [--profile]

Each grid is dry-run in an empty working directory (nothing exists yet, so every job is
scheduled); the trivial workflow is generated in a temporary directory and dry-run the same
way (same interpreter, same flags: those of the profiles), alternating with the grid in one sitting so that both
see the same machine load. Prints jobs, median wall times and the median of the per-round
ratios (target ≤ 1.3). dlbench's Snakefile pauses Python's garbage collector while it plans
(dlbench/planning/dag.py); a third arm, the floor with the collector paused the same way, gives
the like-for-like ratio: what dlbench's own rules and functions cost beyond Snakemake's.
Note: with snakemake-executor-plugin-slurm installed, a Slurm client whose controller does
not answer adds ~10 s to every invocation (the plugin queries Slurm at import): the script
says whether `sinfo` answered.
"""

from __future__ import annotations

import argparse
import os
import pstats
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent

BIG = {
    "grid": {
        "frameworks": ["tensorflow", "pytorch", "mxnet"],
        "models": ["resnet50", "resnet152", "vgg16", "inception_v3", "alexnet", "bert_base"],
        "batch_per_device": [1, 2, 4, 8, 16, 32, 64, 128],
        "precision": ["fp32", "amp"],
        "data": ["synthetic"],
        "exclude": [],
        "scales": ["1x1", "1x4", "2x4", "4x4"],
        "strategies": {"tensorflow": ["multi_worker_mirrored"], "pytorch": ["ddp"], "mxnet": ["dist_sync"]},
    },
    "protocol": {"preset": "caict2020", "repeats": 9},
}

# The floor: `all` plus one rule with jobs - 1 outputs (a shell command, an output path with
# a wildcard, nothing else), so the job count equals the grid's.
TRIVIAL_SNAKEFILE = """\
rule all:
    input:
        expand("out/{{i}}.txt", i=range({jobs} - 1)),


rule one:
    output:
        "out/{{i}}.txt",
    shell:
        "touch {{output}}"
"""


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# Where a dry run's time goes (cProfile, cumulative): phase → (file name, function) of its root.
PHASES = {
    "parse the workflow": ("Snakefile", "<module>"),
    "build the DAG": ("workflow.py", "_build_dag"),
    "per-job dry-run record (log_info)": ("jobs.py", "log_info"),
    "  of which: resources": ("rules.py", "expand_resources"),
    "conda env per job": ("dag.py", "update_conda_envs"),
    "whole run": ("cli.py", "main"),
}
# The like-for-like floor: the same collector policy as dlbench's Snakefile.
PAUSED_GC = "import gc\n\ngc.disable()\n\n\n"
PROFILE: Path | None = None  # set by --profile: dry runs write cProfile stats here


def dry_run(snakefile: Path, work: Path, extra: list[str]) -> tuple[float, int, float]:
    """Wall seconds, jobs, CPU seconds (user + system: less disturbed by other load)."""
    # --rerun-triggers mtime: the profiles' setting (profiles/local, profiles/slurm).
    profiler = ["-m", "cProfile", "-o", str(PROFILE)] if PROFILE else []
    command = [sys.executable, *profiler, "-m", "snakemake", "-n", "-q", "rules", "--rerun-triggers", "mtime"]
    command += ["-s", str(snakefile), "-d", str(work)]
    start, cpu = time.perf_counter(), _children_cpu()
    out = subprocess.run(command + extra, capture_output=True, text=True, check=True, cwd=work).stdout
    elapsed, cpu = time.perf_counter() - start, _children_cpu() - cpu
    return elapsed, int(re.search(r"^total\s+(\d+)", out, re.M).group(1)), cpu


def grid_dry_run(config_path: Path) -> tuple[float, int, float]:
    with tempfile.TemporaryDirectory() as work:
        # A grid file is the whole experiment: nothing of config/config.yaml lies under it.
        return dry_run(REPO / "Snakefile", Path(work), ["--configfile", str(config_path)])


def trivial_dry_run(jobs: int, paused: bool = False) -> tuple[float, int, float]:
    """The floor; `paused`: with the collector paused as dlbench's Snakefile does (planning.py)."""
    with tempfile.TemporaryDirectory() as work:
        snakefile = Path(work) / "Snakefile"
        snakefile.write_text((PAUSED_GC if paused else "") + TRIVIAL_SNAKEFILE.format(jobs=jobs))
        elapsed, total, cpu = dry_run(snakefile, Path(work), [])
    if total != jobs:
        raise RuntimeError(f"trivial workflow planned {total} jobs, expected {jobs}")
    return elapsed, total, cpu


def phase_seconds(stats_file: Path) -> dict[str, float]:
    cumulative: dict[tuple[str, str], float] = {}
    for (path, _, function), row in pstats.Stats(str(stats_file)).stats.items():
        key = (os.path.basename(path), function)
        cumulative[key] = max(cumulative.get(key, 0.0), row[3])
    return {phase: cumulative.get(root, 0.0) for phase, root in PHASES.items()}


def profile(name: str, config_path: Path) -> None:
    """One profiled dry run of the grid and of the floor, side by side: seconds per phase."""
    global PROFILE
    with tempfile.TemporaryDirectory() as tmp:
        PROFILE = Path(tmp) / "grid.prof"
        _, jobs, _ = grid_dry_run(config_path)
        grid = phase_seconds(PROFILE)
        PROFILE = Path(tmp) / "floor.prof"
        trivial_dry_run(jobs)
        floor = phase_seconds(PROFILE)
        PROFILE = None
    excess = grid["whole run"] - floor["whole run"]
    print(f"{name}: cProfile, {jobs} jobs (seconds inflated by the profiler alike on both sides)")
    for phase in PHASES:
        share = (grid[phase] - floor[phase]) / excess if excess > 0 else 0.0
        print(f"   {phase:36s} grid {grid[phase]:7.2f}  floor {floor[phase]:7.2f}  share of the excess {share:6.1%}")


def compare(name: str, config_path: Path, repeats: int) -> None:
    """Alternate grid, floor and like-for-like floor (order rotating every round); print the
    times and the ratios to both floors."""
    times: dict[str, list[float]] = {"grid": [], "floor": [], "paused": []}
    cpu: dict[str, list[float]] = {"grid": [], "floor": [], "paused": []}
    jobs = grid_dry_run(config_path)[1]  # the job count the floors need (not timed)
    arms = {
        "grid": lambda: grid_dry_run(config_path),
        "floor": lambda: trivial_dry_run(jobs),
        "paused": lambda: trivial_dry_run(jobs, paused=True),
    }
    for round_ in range(repeats):
        order = list(arms)[round_ % 3 :] + list(arms)[: round_ % 3]
        for arm in order:
            elapsed, _, used = arms[arm]()
            times[arm].append(elapsed)
            cpu[arm].append(used)

    def ratio(values: dict[str, list[float]], floor: str) -> list[float]:
        return [g / f for g, f in zip(values["grid"], values[floor], strict=True)]

    med = statistics.median
    print(
        f"{name}: {jobs} jobs, snakemake -n median {med(times['grid']):.2f} s "
        f"(min {min(times['grid']):.2f}, max {max(times['grid']):.2f}); trivial floor median "
        f"{med(times['floor']):.2f} s; ratio median {med(ratio(times, 'floor')):.2f} "
        f"(min {min(ratio(times, 'floor')):.2f}, max {max(ratio(times, 'floor')):.2f}, {repeats} rounds); "
        f"CPU-time ratio median {med(ratio(cpu, 'floor')):.2f}; like for like (floor with the collector "
        f"paused too, {med(times['paused']):.2f} s): ratio {med(ratio(times, 'paused')):.2f}, CPU "
        f"{med(ratio(cpu, 'paused')):.2f} (load {os.getloadavg()[0]:.2f})"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--grid", choices=["caict2020", "10k"], action="append", help="default: both")
    p.add_argument("--profile", action="store_true", help="also one cProfile'd run of each: seconds per phase")
    args = p.parse_args()
    sinfo = subprocess.run("timeout 3 sinfo -h >/dev/null 2>&1", shell=True, check=False).returncode == 0
    has_sinfo = shutil.which("sinfo") is not None
    print(f"slurm client installed: {has_sinfo}; controller answering: {sinfo}; load {os.getloadavg()[0]:.2f}")
    # The checkout as tools/bootstrap.sh leaves it: dlbench byte-compiled (else, under
    # PYTHONDONTWRITEBYTECODE, every dry run compiles the modules planning imports).
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "dlbench")], check=True, capture_output=True)
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "big.yaml"
        big.write_text(yaml.safe_dump(BIG))
        grids = {"caict2020": REPO / "config/grids/caict2020.yaml", "10k": big}
        for name in args.grid or list(grids):
            compare(name, grids[name], args.repeats)
            if args.profile:
                profile(name, grids[name])
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
