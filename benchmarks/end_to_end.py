"""End to end: the embedded default grid (config/config.yaml) from warm environments.

    .venvs/analysis/bin/python benchmarks/end_to_end.py [--configfile GRID.yaml] [--keep DIR]

Runs `snakemake --profile profiles/local` in a fresh working directory (datasets, training,
tables, figures, report: everything `bash tools/run.sh` does after its set-up) and prints the
wall time, the number of training runs and the load average before and after (the machine
is shared: a high load inflates the time). Target on 2 cores: ≤ 10 min.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configfile", default=None, help="another grid (default: the embedded one)")
    p.add_argument("--keep", default=None, help="run in this directory and keep it")
    args = p.parse_args()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="dlbench-e2e-"))
    work.mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO / "config", work / "config", dirs_exist_ok=True)
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(work)]
    cmd += ["--profile", str(REPO / "profiles/local")]
    if args.configfile:
        cmd += ["--configfile", str(Path(args.configfile).resolve())]
    load_before = os.getloadavg()
    start = time.perf_counter()
    result = subprocess.run(cmd, cwd=work, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    load_after = os.getloadavg()
    runs = len(list((work / "results/runs").rglob("launch.json")))
    ok = result.returncode == 0 and (work / "results/report/index.html").exists()
    print(f"working directory: {work}")
    print(f"load average (1 min) before {load_before[0]:.2f}, after {load_after[0]:.2f}")
    print(f"end to end: {elapsed / 60:.2f} min for {runs} training runs, report {'written' if ok else 'MISSING'}")
    if not ok:
        print(result.stderr[-3000:], file=sys.stderr)
        sys.exit(1)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
