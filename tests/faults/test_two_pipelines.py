"""Two pipelines on one working directory: the second is refused, and told who holds it.

A first `snakemake` trains a long run; a second one on the same directory must stop at once
with a message naming the first (pid, host, start, command) and what to do, and leave the
first's run alone. After the first is killed (SIGKILL: no onerror), the message says the
holder is gone and how to release the lock.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from tests.conftest import REPO, framework_python

pytestmark = [
    pytest.mark.faults,
    pytest.mark.skipif(not framework_python("pytorch").exists(), reason="the pytorch environment is not built"),
]

LONG = {
    "grid": {
        "frameworks": ["pytorch"],
        "models": ["resnet50"],
        "data": ["synthetic"],
        "batch_per_device": [2],
        "scales": ["1x1"],
        "exclude": [],
    },
    "protocol": {"preset": "mlperf", "warmup_steps": 1, "measured_steps": 3000, "repeats": 1},
    "run": {"image_size": 32, "threads": 1, "progress_every": 0},
}


def snakemake(workdir):
    cmd = [sys.executable, "-m", "snakemake", "runs", "-s", str(REPO / "Snakefile"), "-d", str(workdir)]
    return cmd + ["--profile", str(REPO / "profiles/local"), "--configfile", str(workdir / "long.yaml")]


def test_a_second_pipeline_is_refused_and_told_who_holds_the_directory(tmp_path):
    (tmp_path / "config").mkdir()
    (tmp_path / "config/config.yaml").write_text((REPO / "config/config.yaml").read_text())
    (tmp_path / "long.yaml").write_text(yaml.safe_dump(LONG))
    owner = tmp_path / ".snakemake/dlbench-owner.json"
    with open(tmp_path / "first.log", "wb") as log:
        first = subprocess.Popen(snakemake(tmp_path), cwd=tmp_path, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 120
        while not owner.exists():
            assert first.poll() is None and time.monotonic() < deadline, (tmp_path / "first.log").read_text()[-3000:]
            time.sleep(0.5)
        second = subprocess.run(snakemake(tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert second.returncode != 0
        assert f"is in use by snakemake pid {first.pid}" in second.stderr, second.stderr[-3000:]
        assert "cannot be locked" in second.stderr  # and Snakemake refused to start
        assert first.poll() is None  # the first one goes on
        assert json.loads(owner.read_text())["pid"] == first.pid
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
        stale = subprocess.run(snakemake(tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert stale.returncode != 0 and "no longer running" in stale.stderr and "--unlock" in stale.stderr
    finally:
        if first.poll() is None:
            first.kill()
        subprocess.run(["pkill", "-f", str(tmp_path)], check=False)  # its orphaned training run
