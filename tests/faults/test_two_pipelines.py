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
import time

import pytest

from tests.conftest import framework_python
from tests.faults.pipeline import snakemake, stop_processes_in, toy_grid

pytestmark = [
    pytest.mark.faults,
    pytest.mark.skipif(not framework_python("pytorch").exists(), reason="the pytorch environment is not built"),
]


def test_a_second_pipeline_is_refused_and_told_who_holds_the_directory(tmp_path):
    env = toy_grid(tmp_path, measured_steps=3000, repeats=1, threads=1, step_seconds=0.1)
    owner = tmp_path / ".snakemake/dlbench-owner.json"
    with open(tmp_path / "first.log", "wb") as log:
        first = subprocess.Popen(snakemake(tmp_path, "runs"), cwd=tmp_path, env=env, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 120
        while not owner.exists():
            assert first.poll() is None and time.monotonic() < deadline, (tmp_path / "first.log").read_text()[-3000:]
            time.sleep(0.5)
        second = subprocess.run(
            snakemake(tmp_path, "runs"), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert second.returncode != 0
        assert f"is in use by snakemake pid {first.pid}" in second.stderr, second.stderr[-3000:]
        assert "cannot be locked" in second.stderr  # and Snakemake refused to start
        assert first.poll() is None  # the first one goes on
        assert json.loads(owner.read_text())["pid"] == first.pid
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
        stale = subprocess.run(
            snakemake(tmp_path, "runs"), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert stale.returncode != 0 and "no longer running" in stale.stderr and "--unlock" in stale.stderr
    finally:
        if first.poll() is None:
            first.kill()
        stop_processes_in(tmp_path, grace_s=0)  # its orphaned training run
