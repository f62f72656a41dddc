"""Packed Slurm jobs (slurm.runs_per_job) against one job per run, on the local cluster.

    bash tools/slurm-local/up.sh          # as root: the one-host cluster, 2 nodes
    .venvs/analysis/bin/python benchmarks/slurm_packing.py [--runs-per-job 5] [--jobs-limit 2]

Runs the same 40-run grid of the toy framework (tests/plugins, milliseconds per run; 2 job
shapes × 5 batches × 4 repeats) to its report twice, with `profiles/slurm-local`: packed and
one job per run, each in a new working directory. For each: sbatch calls (the plugin keeps one
log per Slurm job in .snakemake/slurm_logs), sacct's records (jobs, and jobs with their
steps), the pipeline's wall time, and the per-run overhead: allocation time (sacct's Elapsed,
summed) minus the runs' own time (launch.json's wall_seconds), per run. `--jobs-limit N` runs a
third, packed, pass with at most N Slurm jobs queued or running (the profile's `jobs:`; the
local cluster enforces no QOS limits: AccountingStorageEnforce=none) and reports the most jobs
Slurm saw at once.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
PLUGINS = REPO / "tests" / "plugins"

GRID = {
    "grid": {
        "frameworks": ["toy"],
        "models": ["resnet50"],
        "precision": ["fp32"],
        "data": ["synthetic"],
        "batch_per_device": [1, 2, 4, 8, 16],
        "scales": ["1x1", "1x2"],
        "strategies": {"toy": ["replicas"]},
        "exclude": [],
        "only": [],
    },
    "protocol": {"preset": "mlperf", "warmup_steps": 1, "measured_steps": 3, "repeats": 4},
    "run": {"launcher": "srun", "image_size": 32, "threads": 1, "progress_every": 1, "mem_mb": 500},
}


def grid(runs_per_job: int, repeats: int = GRID["protocol"]["repeats"]) -> dict:
    return {**GRID, "protocol": {**GRID["protocol"], "repeats": repeats}, "slurm": {"runs_per_job": runs_per_job}}


def snakemake(workdir: Path, *args: str, timeout: int = 1200) -> subprocess.CompletedProcess:
    # `args` before --configfile, which takes every word after it (a target among them).
    cmd = [
        sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir),
        "--profile", str(REPO / "profiles/slurm-local"), *args, "--configfile", str(workdir / "grid.yaml"),
    ]  # fmt: skip
    env = {**os.environ, "DLBENCH_FRAMEWORK_PATH": str(PLUGINS)}
    return subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def job_ids(workdir: Path) -> list[str]:
    """One log per sbatch call (the profile keeps successful jobs' logs)."""
    return sorted({p.stem for p in (workdir / ".snakemake/slurm_logs").rglob("*.log")}, key=int)


def sacct(ids: list[str], steps: bool) -> list[dict]:
    fields = ["JobID", "State", "ElapsedRaw", "TimelimitRaw", "NNodes", "AllocCPUS"]
    cmd = ["sacct", "-n", "-P", "-j", ",".join(ids), "-o", ",".join(fields)]
    out = subprocess.run(cmd if steps else [*cmd, "-X"], capture_output=True, text=True, check=True).stdout
    return [dict(zip(fields, line.split("|"), strict=False)) for line in out.splitlines() if line]


def run_records(workdir: Path) -> dict[str, dict]:
    """Run directory → launch.json and slurm.json of every run."""
    out = {}
    for path in (workdir / "results/runs").rglob("launch.json"):
        slurm = path.parent / "slurm.json"
        out[str(path.parent.relative_to(workdir))] = {
            "launch": json.loads(path.read_text()),
            "slurm": json.loads(slurm.read_text()) if slurm.exists() else {},
            "step_logs": sorted(p.name for p in path.parent.glob("rank*.steps.jsonl")),
        }
    return out


class QueueWatch(threading.Thread):
    """The most jobs of this working directory squeue lists at once (others may share the cluster)."""

    def __init__(self, workdir: Path):
        super().__init__(daemon=True)
        self.workdir, self.most, self.done = str(workdir), 0, threading.Event()

    def run(self):
        while not self.done.wait(1):
            out = subprocess.run(["squeue", "-h", "-o", "%i|%Z"], capture_output=True, text=True).stdout
            ours = [line for line in out.splitlines() if line.split("|", 1)[-1] == self.workdir]
            self.most = max(self.most, len(ours))


def measure(workdir: Path, runs_per_job: int, *args: str, repeats: int = GRID["protocol"]["repeats"]) -> dict:
    """Run the grid (`repeats` per cell) to its report in `workdir` (new) and collect the figures."""
    workdir.mkdir(parents=True)
    (workdir / "grid.yaml").write_text(yaml.safe_dump(grid(runs_per_job, repeats)))
    watch = QueueWatch(workdir)
    watch.start()
    started = time.monotonic()
    result = snakemake(workdir, *args)
    wall = time.monotonic() - started
    watch.done.set()
    ids = job_ids(workdir)
    jobs = sacct(ids, steps=False) if ids else []
    records = run_records(workdir)
    run_seconds = sum(r["launch"]["wall_seconds"] for r in records.values())
    allocated = sum(int(j["ElapsedRaw"]) for j in jobs)
    return {
        "runs_per_job": runs_per_job,
        "returncode": result.returncode,
        "stderr_tail": result.stderr[-3000:] if result.returncode else "",
        "sbatch_calls": len(ids),
        "sacct_jobs": len(jobs),
        "sacct_records": len(sacct(ids, steps=True)) if ids else 0,
        "job_states": sorted({j["State"] for j in jobs}),
        "timelimits_min": sorted({int(j["TimelimitRaw"]) for j in jobs}),
        "nodes": sorted({int(j["NNodes"]) for j in jobs}),
        "runs": len(records),
        "wall_s": round(wall, 1),
        "allocated_s": allocated,
        "run_s": round(run_seconds, 1),
        "overhead_per_run_s": round((allocated - run_seconds) / max(1, len(records)), 2),
        "wall_per_run_s": round(wall / max(1, len(records)), 2),
        "most_jobs_queued": watch.most,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs-per-job", type=int, default=5)
    parser.add_argument("--jobs-limit", type=int, default=0, help="a third, packed, pass under --jobs N")
    parser.add_argument("--keep", help="working directories under this folder (default: a temporary one)")
    parser.add_argument("--passes", default="packed,single,limited", help="which of packed,single,limited")
    args = parser.parse_args()
    root = Path(args.keep or tempfile.mkdtemp(prefix="slurm_packing_"))
    passes = {
        "packed": (args.runs_per_job, ()),
        "single": (1, ()),
        "limited": (args.runs_per_job, ("--jobs", str(args.jobs_limit))),
    }
    print(f"working directories under {root}")
    for name in args.passes.split(","):
        if name == "limited" and not args.jobs_limit:
            continue
        per_job, extra = passes[name]
        figures = measure(root / name, per_job, *extra)
        print(f"{name}: {json.dumps(figures)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
