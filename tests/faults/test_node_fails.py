"""A node fails under a running 2-node job on the local Slurm cluster (tools/slurm-local).

`scontrol update nodename=n2 state=down` while a 2x1 run trains on n1 and n2: the toy plug-in
(tests/plugins/toy.py), whose planted step time keeps the job running at no CPU cost (what
fails here is a node under Slurm, not a framework; PyTorch DDP across the nodes is test_slurm's).
What Slurm does here (22.05, JobRequeue=1, the default): the step is cancelled "due to node
failure", the job instance ends NODE_FAIL and Slurm requeues the batch job under the same id.
While n2 is out (drained here: ReturnToService=2 returns a DOWN node whose slurmd answers at
once) the job waits; once n2 is resumed, the job runs again, its launcher sets the failed
attempt's files aside in attempt1/ with Slurm's verdict (NODE_FAIL), and the run completes.
Snakemake sees a pending job, not a failure. The 1x1 run beside it is untouched, and the same
command again has nothing to do.
"""

import json
import subprocess
import time

import pandas as pd
import pytest
import yaml

from tests.conftest import REPO, framework_python
from tests.test_slurm import cluster_answers, grid_config, snakemake_command

pytestmark = [
    pytest.mark.faults,
    pytest.mark.slurm,
    pytest.mark.slow,
    pytest.mark.skipif(not cluster_answers(), reason="no Slurm cluster answers (tools/slurm-local/up.sh)"),
    pytest.mark.skipif(not framework_python("pytorch").exists(), reason="the toy's numpy (pytorch env) is not built"),
]

NODE = "n2"
TARGET = "results/tables/cells.csv"
RUNS = "results/runs/toy/resnet50/fp32/synthetic/bs2"
# Seconds a step sleeps: 31 steps of 0.5 s at 2x1 leave the fault time to land mid-run.
TOY = {"DLBENCH_FRAMEWORK_PATH": str(REPO / "tests/plugins"), "DLBENCH_TOY_SLEEP": "2x1=0.5,1x1=0.05"}


def scontrol(*args: str, check: bool = True) -> None:
    subprocess.run(["scontrol", "update", *args], check=check, capture_output=True, timeout=30)


def squeue(job_id: str) -> str:
    out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T|%r"], capture_output=True, text=True, timeout=30)
    return out.stdout.strip()


def wait_for(condition, proc, what: str, timeout: float = 300):
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        assert proc.poll() is None, f"snakemake ended before {what}"
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.5)
    return found


def running_job(run_dir) -> str | None:
    try:
        record = json.loads((run_dir / "slurm.json").read_text())
    except (OSError, ValueError):
        return None
    return record["job_id"] if record.get("state") == "running" and (run_dir / "rank1.steps.jsonl").exists() else None


def files(run_dir) -> dict:
    return {p.relative_to(run_dir): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    config = grid_config({"toy": "replicas"})
    config["grid"].update(scales=["1x1", "2x1"], batch_per_device=[2], only=[])
    config["protocol"]["measured_steps"] = 30
    config["run"]["threads"] = 1
    config["prescreen"] = {"enabled": False}  # the toy has no collectives to screen
    for name, value in TOY.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "config").mkdir()
    (tmp_path / "config/config.yaml").write_text(yaml.safe_dump(config))
    yield tmp_path
    scontrol(f"nodename={NODE}", "state=resume", check=False)  # whatever the test left


def test_a_failed_node_requeues_the_job_and_the_grid_completes(workdir):
    two_nodes, one_node = workdir / f"{RUNS}/2x1/replicas/rep1", workdir / f"{RUNS}/1x1/single/rep1"
    with open(workdir / "first.log", "wb") as log:
        first = subprocess.Popen(
            snakemake_command(workdir, TARGET, timeout=900), cwd=workdir, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        job_id = wait_for(lambda: running_job(two_nodes), first, "a running 2-node job")
        time.sleep(3)  # into its timed steps
        scontrol(f"nodename={NODE}", "state=down", "reason=dlbench fault test")
        scontrol(f"nodename={NODE}", "state=drain", "reason=dlbench fault test")  # keep it out a while
        waiting = wait_for(lambda: squeue(job_id).startswith("PENDING") and squeue(job_id), first, "the requeue", 60)
        time.sleep(5)
        assert squeue(job_id).startswith("PENDING"), "the job ran again while n2 was out"
        scontrol(f"nodename={NODE}", "state=resume")
        scontrol(f"jobid={job_id}", "starttime=now")  # skip Slurm's requeue delay (about 2 min)
        assert first.wait(timeout=900) == 0, (workdir / "first.log").read_text()[-4000:]
    finally:
        if first.poll() is None:
            first.kill()

    failed = json.loads((two_nodes / "attempt1/slurm.json").read_text())
    assert failed["job_id"] == job_id and failed["job_final"]["state"] == "NODE_FAIL", failed
    assert failed["job_final"]["requeued"] is True
    assert sorted(p.name for p in (two_nodes / "attempt1").glob("rank*.steps.jsonl")) == [
        f"rank{r}.steps.jsonl" for r in range(2)
    ]  # the failed attempt's logs are kept, not overwritten
    launch = json.loads((two_nodes / "launch.json").read_text())
    assert launch["rank_exit_codes"] == [0, 0]
    nodes = {json.loads((two_nodes / f"rank{r}.steps.jsonl").open().readline())["node"] for r in range(2)}
    assert nodes == {"n1", NODE}  # placed again on both nodes once n2 was back
    cells = pd.read_csv(workdir / TARGET, dtype={"batch": str}).set_index("scale")
    assert cells.loc["2x1", "status"] == "ok" and cells.loc["1x1", "status"] == "ok", cells.to_string()
    print(f"\n[node fail] job {job_id}: {waiting} after the fault; attempt1 {failed['job_final']}")

    kept = {run: files(run) for run in (two_nodes, one_node)}
    again = subprocess.run(snakemake_command(workdir, TARGET, timeout=300), cwd=workdir, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Nothing to be done" in again.stdout + again.stderr
    assert {run: files(run) for run in (two_nodes, one_node)} == kept  # nothing redone
