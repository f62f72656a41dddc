"""A one-run-shape toy grid in a fresh working directory, and the snakemake command for it
(the fault tests that interrupt or double a pipeline)."""

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

import yaml

from tests.conftest import REPO

PLUGINS = REPO / "tests" / "plugins"


def toy_grid(workdir, measured_steps: int, repeats: int, threads: int, step_seconds: float) -> dict[str, str]:
    """config/config.yaml (the embedded default) plus grid.yaml: the toy plug-in (tests/plugins/toy.py)
    at batch 2, 1x1, each step sleeping `step_seconds` (a run that lasts, at no CPU cost: what
    these tests interrupt is the pipeline, not a framework). Returns the environment the
    pipeline needs (DLBENCH_FRAMEWORK_PATH, DLBENCH_TOY_SLEEP)."""
    (workdir / "config").mkdir()
    (workdir / "config/config.yaml").write_text((REPO / "config/config.yaml").read_text())
    grid = {
        "grid": {
            "frameworks": ["toy"],
            "models": ["resnet50"],
            "data": ["synthetic"],
            "batch_per_device": [2],
            "scales": ["1x1"],
            "strategies": {"toy": ["replicas"]},
            "exclude": [],
        },
        "protocol": {"preset": "mlperf", "warmup_steps": 1, "measured_steps": measured_steps, "repeats": repeats},
        "run": {"image_size": 32, "threads": threads, "progress_every": 0},
    }
    (workdir / "grid.yaml").write_text(yaml.safe_dump(grid))
    return {**os.environ, "DLBENCH_FRAMEWORK_PATH": str(PLUGINS), "DLBENCH_TOY_SLEEP": f"1x1={step_seconds}"}


def snakemake(workdir, target: str, *extra: str) -> list[str]:
    # The target before --configfile, which takes every word after it.
    cmd = [sys.executable, "-m", "snakemake", target, *extra, "-s", str(REPO / "Snakefile"), "-d", str(workdir)]
    return cmd + ["--profile", str(REPO / "profiles/local"), "--configfile", str(workdir / "grid.yaml")]


def processes_in(directory) -> list[int]:
    """The processes working in `directory` (their command lines name it only relatively:
    a training run's --run-dir is results/runs/...)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and Path(os.readlink(entry / "cwd")).is_relative_to(directory):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def stop_processes_in(directory, grace_s: float = 60) -> None:
    """Wait up to `grace_s` for the processes working in `directory` to end, then SIGKILL
    them (a killed Snakemake leaves its jobs running)."""
    deadline = time.monotonic() + grace_s
    while processes_in(directory) and time.monotonic() < deadline:
        time.sleep(0.5)
    for pid in processes_in(directory):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
