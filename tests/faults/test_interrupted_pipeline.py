"""The pipeline is interrupted mid-grid (SIGINT, then SIGKILL of snakemake) and started again.

What a user must see: after `snakemake --unlock` (which the second start asks for), the same
command finishes the grid; the run that had finished is kept byte for byte (not redone), the
interrupted run's files are kept in `attempt<k>/` and it is run again, nothing is duplicated.
"""

import os
import signal
import subprocess
import time

import pandas as pd
import pytest

from tests.conftest import framework_python
from tests.faults.pipeline import snakemake, stop_processes_in, toy_grid

pytestmark = [
    pytest.mark.faults,
    pytest.mark.slow,
    pytest.mark.skipif(not framework_python("pytorch").exists(), reason="the toy's numpy (pytorch env) is not built"),
]

TARGET = "results/tables/cells.csv"


def run_dir(workdir, repeat):
    return workdir / f"results/runs/toy/resnet50/fp32/synthetic/bs2/1x1/single/rep{repeat}"


def wait_for(condition, proc, what, timeout=600):  # a loaded 2-core machine: minutes
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, f"snakemake ended before {what}"
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.3)


def test_an_interrupted_grid_finishes_on_the_next_start(tmp_path):
    # Two threads a run: the local profile's two cores run the repeats one after the other.
    env = toy_grid(tmp_path, measured_steps=20, repeats=2, threads=2, step_seconds=0.3)
    with open(tmp_path / "first.log", "wb") as log:
        first = subprocess.Popen(snakemake(tmp_path, TARGET), cwd=tmp_path, env=env, stdout=log, stderr=log)
    try:
        runs = [run_dir(tmp_path, r) for r in (1, 2)]
        wait_for(lambda: any((d / "launch.json").exists() for d in runs), first, "a finished run")
        done = next(d for d in runs if (d / "launch.json").exists())
        wait_for(lambda: any((d / "rank0.steps.jsonl").exists() for d in runs if d != done), first, "a second run")
        first.send_signal(signal.SIGINT)
        time.sleep(1.0)
        first.kill()
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
            stop_processes_in(tmp_path, grace_s=0)  # a failed wait: its training run too
    stop_processes_in(tmp_path)  # the interrupted run's own processes end on Snakemake's SIGINT
    kept = {path.name: path.read_bytes() for path in done.iterdir() if path.is_file()}

    refused = subprocess.run(
        snakemake(tmp_path, TARGET), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert refused.returncode != 0 and "--unlock" in refused.stderr
    subprocess.run(
        snakemake(tmp_path, TARGET, "--unlock"), cwd=tmp_path, env=env, check=True, capture_output=True, timeout=300
    )
    again = subprocess.run(
        snakemake(tmp_path, TARGET), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    assert again.returncode == 0, again.stderr[-4000:]

    assert {path.name: path.read_bytes() for path in done.iterdir() if path.is_file()} == kept  # not redone
    cells = pd.read_csv(tmp_path / TARGET)
    assert cells["status"].tolist() == ["ok"] and cells["n"].tolist() == [2]  # every repeat, once
    interrupted = next(d for d in runs if d != done)
    if (interrupted / "attempt1").is_dir():  # it was stopped before its launch.json: set aside, redone
        assert os.listdir(interrupted / "attempt1")
