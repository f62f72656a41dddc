"""A one-run-shape PyTorch grid in a fresh working directory, and the snakemake command for it
(the fault tests that interrupt or double a pipeline)."""

import sys

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
