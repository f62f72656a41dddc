"""One rank of a running 2-rank run is SIGKILLed: the survivor must not wait for the time limit.

What a user must see: the launcher ends the run within seconds (RANK_DEATH_GRACE_S), its
launch.json and the cell say which rank died and how, and the survivor's log is kept.
"""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from dlbench.analysis.aggregate import summarize_run
from dlbench.coords import RunCoords
from dlbench.launch.launchers import RANK_DEATH_GRACE_S
from tests.conftest import REPO, SHARED_CORES_ENV, framework_python

# Framework and a strategy whose two ranks block on each other every step.
RUNS = {"pytorch": "ddp", "mxnet": "dist_sync"}
TIME_LIMIT_S = 600  # far beyond what the test allows: a hang would show


def children_by_rank(launcher: subprocess.Popen) -> dict[int, int]:
    """{rank: pid} of the launcher's rank processes (their environment says their rank)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            env = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        rank = [v.split(b"=", 1)[1] for v in env if v.startswith(b"DLBENCH_RANK=")]
        if ppid == launcher.pid and rank:
            found[int(rank[0])] = int(entry.name)
    return found


@pytest.mark.faults
@pytest.mark.parametrize("framework", sorted(RUNS))
def test_a_dead_rank_ends_the_run_and_is_named(tmp_path, framework):
    python = framework_python(framework)
    if not python.exists():
        pytest.skip(f"the {framework} environment is not built")
    coords = RunCoords(framework, "resnet50", "fp32", "synthetic", "2", "1x2", RUNS[framework], 1)
    argv = [f"--{k.replace('_', '-')}={v}" for k, v in coords.as_dict().items()]
    argv += [f"--run-dir={tmp_path / coords.run_dir}", "--preset=caict2020", "--warmup-steps=1"]
    argv += ["--measured-steps=2000", "--statistic=mean", "--image-size=32", "--threads=2"]
    argv += [f"--time-limit={TIME_LIMIT_S}", "--progress-every=0"]
    env = {"PYTHONPATH": str(REPO), "PATH": os.environ["PATH"], **SHARED_CORES_ENV}
    log = tmp_path / "launcher.log"  # a file: the ranks' own helpers (ps-lite) may outlive them
    with open(log, "wb") as stderr:
        launcher = subprocess.Popen([str(python), "-m", "dlbench.launch", *argv], cwd=REPO, env=env, stderr=stderr)
    run_dir = tmp_path / coords.run_dir
    try:
        deadline = time.monotonic() + 300
        while not (run_dir / "rank1.steps.jsonl").exists():  # written once the rank has built its model
            assert launcher.poll() is None and time.monotonic() < deadline, "the run never started"
            time.sleep(0.5)
        time.sleep(3)  # into the timed loop
        os.kill(children_by_rank(launcher)[1], signal.SIGKILL)
        killed = time.monotonic()
        launcher.wait(timeout=RANK_DEATH_GRACE_S + 60)
        ended_after = time.monotonic() - killed
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert ended_after < RANK_DEATH_GRACE_S + 30, f"the launcher took {ended_after:.0f} s"
    assert "rank 1 ended by SIGKILL" in log.read_text(errors="replace")
    record = json.loads((run_dir / "launch.json").read_text())
    assert record["rank_exit_codes"][1] == -signal.SIGKILL
    row = summarize_run(coords, tmp_path)
    assert row["status"] == "killed" and "rank 1 ended by SIGKILL" in row["reason"], row["reason"]
    assert (run_dir / "rank0.steps.jsonl").stat().st_size > 0  # the survivor's evidence is kept
