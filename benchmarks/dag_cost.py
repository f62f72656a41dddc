"""DAG cost: wall time of `snakemake -n` for the CAICT 2020 grid and for a 10 000-run grid.

    .venvs/analysis/bin/python benchmarks/dag_cost.py [--repeats 3]

Each grid is dry-run in an empty working directory (nothing exists yet, so every job is
scheduled). Prints the number of jobs and the median wall time. Targets on 2 cores:
CAICT ≤ 5 s, 10 000 runs ≤ 30 s. Note: with snakemake-executor-plugin-slurm installed, a
Slurm client whose controller does not answer adds ~10 s to every invocation (the plugin
queries Slurm at import): the script says whether `sinfo` answered.
"""

from __future__ import annotations

import argparse
import re
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


def dry_run(config_path: Path) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as work:
        # The grid file is merged over config/config.yaml: both grids set every grid key the
        # embedded default sets (data, exclude), so the default does not leak into them.
        shutil.copytree(REPO / "config", Path(work) / "config")
        start = time.perf_counter()
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "snakemake",
                "-n",
                "-q",
                "rules",
                "-s",
                str(REPO / "Snakefile"),
                "-d",
                work,
                "--configfile",
                str(config_path),
            ],
            capture_output=True,
            text=True,
            check=True,
            cwd=work,
        ).stdout
        elapsed = time.perf_counter() - start
    total = int(re.search(r"^total\s+(\d+)", out, re.M).group(1))
    return elapsed, total


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    sinfo = subprocess.run("timeout 3 sinfo -h >/dev/null 2>&1", shell=True, check=False).returncode == 0
    has_sinfo = shutil.which("sinfo") is not None
    print(f"slurm client installed: {has_sinfo}; controller answering: {sinfo}")
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "big.yaml"
        big.write_text(yaml.safe_dump(BIG))
        for name, path in (("caict2020", REPO / "config/grids/caict2020.yaml"), ("10k runs", big)):
            times, jobs = [], 0
            for _ in range(args.repeats):
                elapsed, jobs = dry_run(path)
                times.append(elapsed)
            print(
                f"{name}: {jobs} jobs, snakemake -n median {statistics.median(times):.2f} s "
                f"(min {min(times):.2f}, max {max(times):.2f}, {args.repeats} runs)"
            )


if __name__ == "__main__":
    main()
