"""The suite's one real end-to-end pipeline run (Snakemake → runs → tables → figures → report)
on a tiny PyTorch grid, made once per session and read by every test that only reads it
(tests/test_end_to_end.py, the browser test of a real report), and the snakemake command the
pipeline tests share."""

from __future__ import annotations

import subprocess
import sys

import yaml

from tests.conftest import REPO

TINY = {
    "grid": {
        "frameworks": ["pytorch"],
        "models": ["resnet50"],
        "data": ["synthetic", "real"],
        "batch_per_device": [2],
        "scales": ["1x1", "1x2"],
        # Horovod does not build here: its cells stay in the tables as N/A with the reason.
        "strategies": {"pytorch": ["ddp", "horovod"]},
        "exclude": [],  # not the default grid's (real data on one device only)
    },
    "protocol": {"preset": "mlperf", "warmup_steps": 1, "measured_steps": 3, "repeats": 2},
    "run": {"image_size": 32, "threads": 2, "progress_every": 1},
    "data": {"images": {"count": 32, "classes": 4, "image_size": 40, "shards": 2}},
}


def snakemake(workdir, *args, timeout: int = 900) -> subprocess.CompletedProcess:
    """The pipeline in `workdir` with the local profile and `workdir/tiny.yaml` over the default config."""
    cmd = [
        sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir),
        "--profile", str(REPO / "profiles/local"), "--configfile", str(workdir / "tiny.yaml"), *args,
    ]  # fmt: skip
    return subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=timeout, check=False)


def run(workdir):
    """Run the TINY grid to its report in `workdir` (a new, empty directory)."""
    (workdir / "config").mkdir()
    (workdir / "config/config.yaml").write_text((REPO / "config/config.yaml").read_text())
    (workdir / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    result = snakemake(workdir)
    assert result.returncode == 0, result.stderr[-4000:]
    return workdir
