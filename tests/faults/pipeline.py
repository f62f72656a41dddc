"""A one-run-shape PyTorch grid in a fresh working directory, and the snakemake command for it
(the fault tests that interrupt or double a pipeline)."""

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

import yaml

from tests.conftest import REPO


def pytorch_grid(workdir, measured_steps: int, repeats: int, threads: int) -> None:
    """config/config.yaml (the embedded default) plus grid.yaml: ResNet-50 at 32 px, batch 2, 1x1."""
    (workdir / "config").mkdir()
    (workdir / "config/config.yaml").write_text((REPO / "config/config.yaml").read_text())
    grid = {
        "grid": {
            "frameworks": ["pytorch"],
            "models": ["resnet50"],
            "data": ["synthetic"],
            "batch_per_device": [2],
            "scales": ["1x1"],
            "exclude": [],
        },
        "protocol": {"preset": "mlperf", "warmup_steps": 1, "measured_steps": measured_steps, "repeats": repeats},
        "run": {"image_size": 32, "threads": threads, "progress_every": 0},
    }
    (workdir / "grid.yaml").write_text(yaml.safe_dump(grid))


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
