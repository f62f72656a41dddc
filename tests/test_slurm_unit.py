"""dlbench.launch.slurm and the srun launcher without a cluster: Slurm's environment → Distributed, host lists, the srun
command, exit codes, and what happens to a run that Slurm ended (fake sacct/squeue/srun)."""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path

import pytest

import dlbench
import dlbench.launch as launch_package
from dlbench.launch import LaunchRequest, slurm
from dlbench.launch.launchers import SrunLauncher, this_rank
from dlbench.launch.record import slurm_verdict, write_launch_record
from dlbench.launch.run import main
from dlbench.protocol import RunProtocol
from dlbench.runners import run_layout
from tests.conftest import make_coords, write_run

UNRESOLVABLE = "dlbench-no-such-node"


# ------------------------------------------------------------------------ parsing
@pytest.mark.parametrize(
    "text, names",
    [
        ("n1", ["n1"]),
        ("n[1-2]", ["n1", "n2"]),
        ("gpu[08-10,12]", ["gpu08", "gpu09", "gpu10", "gpu12"]),
        ("a,b[3-4],c", ["a", "b3", "b4", "c"]),
        ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
        ("node[9-11]", ["node9", "node10", "node11"]),
    ],
)
def test_expand_hostlist(text, names):
    assert slurm.expand_hostlist(text) == names


@pytest.mark.parametrize("bad", ["n[1-2", "n1-2]", "n[a-b]", "n[3-1]"])
def test_expand_hostlist_rejects_malformed(bad):
    with pytest.raises(ValueError):
        slurm.expand_hostlist(bad)


@pytest.mark.parametrize("text, counts", [("4", [4]), ("2(x3),1", [2, 2, 2, 1]), ("3,1", [3, 1]), ("2(x2)", [2, 2])])
def test_expand_tasks_per_node(text, counts):
    assert slurm.expand_tasks_per_node(text) == counts


def test_parse_node_addresses():
    text = (
        "NodeName=n1 Arch=x86_64 CoresPerSocket=1 NodeAddr=127.0.0.1 NodeHostName=vm State=IDLE\n"
        "NodeName=n2 Arch=x86_64 NodeAddr=10.0.0.2 NodeHostName=vm2 State=MIXED\n"
    )
    assert slurm.parse_node_addresses(text) == {"n1": "127.0.0.1", "n2": "10.0.0.2"}
    addresses = {"n1": "127.0.0.1", "n2": "10.0.0.2"}
    assert slurm.parse_addresses(slurm.format_addresses(addresses)) == addresses


def test_port_resources_and_status_mapping():
    assert slurm.master_port(11) == slurm.master_port("11")
    assert slurm.master_port(11) != slurm.master_port(12)
    ports = {slurm.master_port(j) for j in range(1000)}
    assert min(ports) >= 1024 and max(ports) + slurm.PORT_STRIDE <= 32768
    assert slurm.cpus_per_task(2, 2) == 1 and slurm.cpus_per_task(8, 2) == 4 and slurm.cpus_per_task(1, 4) == 1
    assert slurm.runtime_minutes(900) == 20 and slurm.runtime_minutes(60) == 6
    assert slurm.runtime_minutes(0) == 720
    assert slurm.slurm_status("CANCELLED by 0") == "cancelled"
    assert slurm.slurm_status("CANCELLED+") == "cancelled"
    assert slurm.slurm_status("OUT_OF_MEMORY") == "oom"
    assert slurm.slurm_status("TIMEOUT") == "timeout"
    assert slurm.slurm_status("NODE_FAIL") == "failed"
    assert slurm.slurm_status("COMPLETED") is None and slurm.slurm_status(None) is None


# ------------------------------------------------------------- rank environment
def srun_task_env(rank: int, node_id: int, local: int, **extra) -> dict:
    env = {
        "SLURM_JOB_ID": "4242",
        "SLURM_PROCID": str(rank),
        "SLURM_NTASKS": "4",
        "SLURM_STEP_NUM_TASKS": "4",
        "SLURM_LOCALID": str(local),
        "SLURM_NODEID": str(node_id),
        "SLURM_STEP_NODELIST": "n[1-2]",
        "SLURM_JOB_NODELIST": "n[1-2]",
        "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
        "SLURM_TASKS_PER_NODE": "2(x2)",
        "SLURMD_NODENAME": f"n{node_id + 1}",
        "DLBENCH_SRUN": "1",
        "DLBENCH_MASTER_ADDR": "10.0.0.1",
        "DLBENCH_MASTER_PORT": "13000",
        "DLBENCH_SLURM_NODE_ADDRS": "n1=10.0.0.1,n2=10.0.0.2",
    }
    env.update(extra)
    return env


def test_distributed_from_environment_2x2():
    dist = slurm.distributed_from_environment(srun_task_env(rank=3, node_id=1, local=1))
    assert (dist.rank, dist.world_size, dist.local_rank, dist.local_world_size) == (3, 4, 1, 2)
    assert (dist.master_addr, dist.master_port, dist.node) == ("10.0.0.1", 13000, "n2")
    assert dist.endpoints["workers"] == ["10.0.0.1:13000", "10.0.0.1:13001", "10.0.0.2:13002", "10.0.0.2:13003"]


def test_every_rank_agrees_on_the_rendezvous():
    dists = [slurm.distributed_from_environment(srun_task_env(r, r // 2, r % 2)) for r in range(4)]
    assert len({(d.master_addr, d.master_port, tuple(d.endpoints["workers"])) for d in dists}) == 1
    assert [d.node for d in dists] == ["n1", "n1", "n2", "n2"]


def test_uneven_placement_and_ntasks_per_node_fallback():
    env = srun_task_env(3, 1, 0, SLURM_STEP_TASKS_PER_NODE="3,1", SLURM_TASKS_PER_NODE="3,1")
    dist = slurm.distributed_from_environment(env)
    assert dist.local_world_size == 1
    assert dist.endpoints["workers"][2:] == ["10.0.0.1:13002", "10.0.0.2:13003"]
    env = srun_task_env(1, 0, 1, SLURM_NTASKS_PER_NODE="2")
    del env["SLURM_STEP_TASKS_PER_NODE"], env["SLURM_TASKS_PER_NODE"]
    assert slurm.distributed_from_environment(env).local_world_size == 2


def test_rendezvous_without_the_launcher_environment():
    """A rank started by a plain `srun` (no launcher): the first node's address, a port from
    the job id; a node name that does not resolve falls back to the loopback address."""
    env = srun_task_env(0, 0, 0, SLURM_STEP_NODELIST=f"{UNRESOLVABLE}[1-2]", SLURMD_NODENAME=f"{UNRESOLVABLE}1")
    for key in ("DLBENCH_MASTER_ADDR", "DLBENCH_MASTER_PORT", "DLBENCH_SLURM_NODE_ADDRS"):
        del env[key]
    dist = slurm.distributed_from_environment(env)
    assert dist.master_addr == "127.0.0.1"
    assert dist.master_port == slurm.master_port(4242)
    assert dist.node == f"{UNRESOLVABLE}1"


def test_single_task_step():
    env = {
        "SLURM_PROCID": "0",
        "SLURM_NTASKS": "1",
        "SLURM_LOCALID": "0",
        "SLURM_JOB_ID": "7",
        "SLURM_STEP_NODELIST": "localhost",
        "SLURM_STEP_TASKS_PER_NODE": "1",
        "SLURMD_NODENAME": "localhost",
    }
    dist = slurm.distributed_from_environment(env)
    assert (dist.rank, dist.world_size, dist.local_world_size, dist.node) == (0, 1, 1, "localhost")


def test_launch_recognises_an_srun_rank(monkeypatch):
    for key in list(os.environ):
        if key.startswith(("SLURM_", "DLBENCH_")):
            monkeypatch.delenv(key)
    assert this_rank() is None
    monkeypatch.setenv("SLURM_PROCID", "0")
    assert this_rank() is None  # inside a job step, but not one of our ranks
    for key, value in srun_task_env(2, 1, 0).items():
        monkeypatch.setenv(key, value)
    assert this_rank().rank == 2


# ---------------------------------------------------------------- srun command
def test_srun_command():
    inner = ["python", "-m", "dlbench.launch", "--scale", "2x4"]
    cmd = slurm.srun_command(2, 4, 3, "cuda", inner, overlap=False)
    assert cmd[0] == "srun"
    for flag in (
        "--nodes=2",
        "--ntasks=8",
        "--ntasks-per-node=4",
        "--cpus-per-task=3",
        "--distribution=block",
        "--kill-on-bad-exit=0",
        "--gpus-per-node=4",
    ):
        assert flag in cmd
    assert "--overlap" not in cmd
    assert cmd[-len(inner) :] == inner
    cpu = slurm.srun_command(1, 1, 2, "cpu", inner, overlap=True)
    assert "--overlap" in cpu and not any(c.startswith("--gpus") for c in cpu)


def test_rank_environment_drops_the_outer_steps_slurm_settings():
    outer = {
        "SLURM_JOB_ID": "9",
        "SLURM_NTASKS": "1",
        "SLURM_CPUS_PER_TASK": "2",
        "SLURM_DISTRIBUTION": "cyclic",
        "SRUN_CPUS_PER_TASK": "2",
        "SLURM_CONF": "/etc/slurm/slurm.conf",
        "PATH": "/bin",
        "DLBENCH_RANK": "0",
    }
    env = slurm.rank_environment(outer, "10.0.0.1", 13000, {"n1": "10.0.0.1"})
    assert env["SLURM_JOB_ID"] == "9" and env["SLURM_CONF"] == "/etc/slurm/slurm.conf" and env["PATH"] == "/bin"
    for gone in ("SLURM_NTASKS", "SLURM_CPUS_PER_TASK", "SLURM_DISTRIBUTION", "SRUN_CPUS_PER_TASK", "DLBENCH_RANK"):
        assert gone not in env
    assert env["DLBENCH_SRUN"] == "1" and env["DLBENCH_MASTER_PORT"] == "13000"


# ------------------------------------------------- fake Slurm commands on PATH
def fake_commands(tmp_path: Path, monkeypatch, **scripts: str) -> None:
    bindir = tmp_path / "fakebin"
    bindir.mkdir(exist_ok=True)
    for name, body in scripts.items():
        path = bindir / name
        path.write_text("#!/bin/sh\n" + body + "\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")


SCONTROL = """case "$3" in
  job) echo "JobId=$4 JobName=x NodeList=n[1-2] BatchHost=n1";;
  node) echo "NodeName=n1 NodeAddr=127.0.0.1 State=ALLOCATED"; echo "NodeName=n2 NodeAddr=127.0.0.1 State=ALLOCATED";;
esac"""

# A fake srun: runs nothing, leaves the exit codes an OOM-killed rank 1 would, and says so.
SRUN_OOM = """dir=$DLBENCH_EXIT_DIR
echo 0 > "$dir/rank0.exitcode"; echo 137 > "$dir/rank1.exitcode"
echo "slurmstepd-n1: error: Detected 1 oom-kill event(s) in StepId=77.0." >&2
echo "srun: error: n1: task 1: Out Of Memory" >&2
exit 1"""


def srun_request(run_dir: Path, coords=None, scale: str = "1x2", **options) -> LaunchRequest:
    coords = coords or make_coords(scale=scale, strategy="ddp" if scale != "1x1" else "single")
    settings = {"threads": 2, "device": "cpu", "time_limit": 30, **options}
    return LaunchRequest(coords, RunProtocol("mlperf", 1, 3, "mean"), str(run_dir), launcher="srun", **settings)


def test_launch_records_exit_codes_and_oom(tmp_path, monkeypatch):
    fake_commands(tmp_path, monkeypatch, scontrol=SCONTROL, srun=SRUN_OOM)
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.delenv("SLURM_STEP_ID", raising=False)
    monkeypatch.setenv("DLBENCH_EARLIER_ATTEMPT", "settle")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    codes = SrunLauncher(srun_request(run_dir)).launch()
    assert codes == [0, 137]
    record = json.loads((run_dir / "slurm.json").read_text())
    assert record["job_id"] == "77" and record["nodes"] == ["n1"] and record["master_addr"] == "127.0.0.1"
    assert record["srun_exit_code"] == 1 and record["oom_kill"] is True and record["rank_exit_codes"] == [0, 137]
    assert "--ntasks-per-node=2" in record["srun"]
    assert not list(run_dir.glob("*.exitcode"))
    assert slurm.outcome(run_dir) == ("oom", "Slurm job 77: a rank was killed by the out-of-memory handler")


def test_launch_starts_the_strategys_tasks_per_node(tmp_path, monkeypatch):
    """A parameter-server run at 2x2 is one task per node (rank 0 coordinates, the other
    serves its node's devices): srun starts 2 tasks, GPUs stay per node."""
    fake_commands(tmp_path, monkeypatch, scontrol=SCONTROL, srun=SRUN_OOM)
    monkeypatch.setenv("SLURM_JOB_ID", "78")
    monkeypatch.delenv("SLURM_STEP_ID", raising=False)
    monkeypatch.setenv("DLBENCH_EARLIER_ATTEMPT", "settle")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    coords = make_coords(framework="tensorflow", scale="2x2", strategy="parameter_server")
    codes = SrunLauncher(srun_request(run_dir, coords, threads=4, device="cuda")).launch()
    assert codes == [0, 137]  # one per task
    srun = json.loads((run_dir / "slurm.json").read_text())["srun"]
    for flag in ("--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--cpus-per-task=4", "--gpus-per-node=2"):
        assert flag in srun


def test_srun_command_for_one_process_per_node():
    cmd = slurm.srun_command(1, 1, 8, "cuda", ["python"], overlap=False, gpus_per_node=4)
    assert "--ntasks=1" in cmd and "--ntasks-per-node=1" in cmd and "--gpus-per-node=4" in cmd


def test_node_addresses_for_per_node_strategies():
    """Every task also gets every node's address, in node order (ParameterServerStrategy)."""
    dists = [slurm.distributed_from_environment(srun_task_env(r, r // 2, r % 2)) for r in range(4)]
    assert {tuple(d.endpoints["nodes"]) for d in dists} == {("10.0.0.1", "10.0.0.2")}
    one_per_node = srun_task_env(
        1,
        1,
        0,
        SLURM_NTASKS="2",
        SLURM_STEP_NUM_TASKS="2",
        SLURM_STEP_TASKS_PER_NODE="1(x2)",
        SLURM_TASKS_PER_NODE="1(x2)",
    )
    dist = slurm.distributed_from_environment(one_per_node)
    assert (dist.rank, dist.world_size, dist.local_world_size) == (1, 2, 1)
    assert dist.endpoints["nodes"] == ["10.0.0.1", "10.0.0.2"]


def test_launch_outside_slurm_exits_with_a_message(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("SLURM_JOBID", raising=False)
    with pytest.raises(SystemExit, match="needs a Slurm allocation"):
        SrunLauncher(srun_request(tmp_path)).launch()


def test_launch_refuses_a_scale_larger_than_the_allocation(tmp_path, monkeypatch):
    fake_commands(tmp_path, monkeypatch, scontrol='echo "JobId=5 NodeList=n1"', srun="exit 0")
    monkeypatch.setenv("SLURM_JOB_ID", "5")
    with pytest.raises(SystemExit, match="needs 2 nodes"):
        SrunLauncher(srun_request(tmp_path, scale="2x2")).launch()


def sacct_says(state: str) -> str:
    return f'echo "$5|{state}|0:0|00:00:09|None"'


def cancelled_run(tmp_path: Path, job_id: str = "31") -> Path:
    run_dir = tmp_path / "results/runs/x/rep1"
    run_dir.mkdir(parents=True)
    slurm.write_record(run_dir, {"job_id": job_id, "attempt": 1, "state": "running"})
    return run_dir


def test_a_later_invocation_records_a_run_slurm_cancelled(tmp_path, monkeypatch):
    fake_commands(tmp_path, monkeypatch, sacct=sacct_says("CANCELLED by 0"))
    run_dir = cancelled_run(tmp_path)
    assert slurm.unsettled(run_dir)
    assert slurm.previous_attempt(run_dir, world=2, settle=True) == [None, None]
    record = slurm.read_record(run_dir)
    assert record["state"] == "settled" and record["job_final"]["state"] == "CANCELLED by 0"
    assert record["job_final"]["source"] == "sacct"
    assert slurm.outcome(run_dir) == ("cancelled", "Slurm job 31: CANCELLED by 0")


def test_squeue_answers_when_accounting_is_off(tmp_path, monkeypatch):
    fake_commands(
        tmp_path,
        monkeypatch,
        sacct="echo 'accounting storage is disabled' >&2; exit 1",
        squeue='echo "31|TIMEOUT|TimeLimit"',
    )
    run_dir = cancelled_run(tmp_path)
    slurm.previous_attempt(run_dir, world=1, settle=True)
    assert slurm.outcome(run_dir) == ("timeout", "Slurm job 31: TIMEOUT (TimeLimit)")


def test_a_retry_moves_the_earlier_attempt_aside(tmp_path, monkeypatch):
    fake_commands(tmp_path, monkeypatch, sacct=sacct_says("CANCELLED by 0"))
    coords = make_coords()
    run_dir = write_run(tmp_path, coords, [[0.1, 0.1]], status="cancelled")
    slurm.write_record(run_dir, {"job_id": "31", "attempt": 1, "state": "running"})
    assert slurm.attempt_number(run_dir) == 1
    assert slurm.previous_attempt(run_dir, world=1, settle=False) is None
    assert not list(run_dir.glob("rank*")) and not (run_dir / "slurm.json").exists()
    moved = run_dir / "attempt1"
    assert (moved / "rank0.steps.jsonl").exists()
    assert json.loads((moved / "slurm.json").read_text())["job_final"]["state"] == "CANCELLED by 0"
    assert slurm.attempt_number(run_dir) == 2  # the retry's slurm.json says so
    assert slurm.previous_attempt(run_dir, world=1, settle=False) is None  # nothing left: just run


def test_an_earlier_job_still_running_is_not_touched(tmp_path, monkeypatch):
    fake_commands(tmp_path, monkeypatch, sacct=sacct_says("RUNNING"))
    monkeypatch.setenv("SLURM_JOB_ID", "99")
    monkeypatch.setattr(slurm.attempts, "ACTIVE_WAIT_S", 0)
    run_dir = cancelled_run(tmp_path)
    for settle in (True, False):
        with pytest.raises(SystemExit, match="still RUNNING"):
            slurm.previous_attempt(run_dir, world=1, settle=settle)
    assert (run_dir / "slurm.json").exists() and not (run_dir / "attempt1").exists()


def test_accounting_lagging_behind_is_waited_out(tmp_path, monkeypatch):
    counter = tmp_path / "calls"
    lagging = f"""n=$(cat {counter} 2>/dev/null || echo 0); echo $((n + 1)) > {counter}
if [ "$n" -lt 2 ]; then echo "$5|RUNNING|0:0|00:00:05|None"; else echo "$5|CANCELLED by 0|0:0|00:00:09|None"; fi"""
    fake_commands(tmp_path, monkeypatch, sacct=lagging)
    monkeypatch.setattr(slurm.attempts.time, "sleep", lambda s: None)
    run_dir = cancelled_run(tmp_path)
    assert slurm.previous_attempt(run_dir, world=1, settle=True) == [None]
    assert slurm.outcome(run_dir)[0] == "cancelled" and counter.read_text().strip() == "3"


def test_job_id_from_rank_log_headers_when_slurm_json_is_missing(tmp_path, monkeypatch):
    fake_commands(tmp_path, monkeypatch, sacct=sacct_says("OUT_OF_MEMORY"))
    coords = make_coords()
    run_dir = tmp_path / coords.run_dir
    run_dir.mkdir(parents=True)
    header = {"type": "header", "provenance": {"slurm": {"slurm_job_id": "55"}}}
    (run_dir / "rank0.steps.jsonl").write_text(json.dumps(header) + "\n")
    assert slurm.previous_attempt(run_dir, world=1, settle=True) == [None]
    assert slurm.outcome(run_dir)[0] == "oom"


def test_nothing_to_settle(tmp_path):
    assert slurm.previous_attempt(tmp_path, world=1, settle=True) is None
    assert slurm.outcome(tmp_path) == (None, "")
    (tmp_path / "launch.json").write_text("{}")
    (tmp_path / "slurm.json").write_text('{"job_id": "3", "state": "finished", "oom_kill": false}')
    assert not slurm.unsettled(tmp_path)
    assert slurm.outcome(tmp_path) == (None, "")


def test_only_record_ended_run_settles(monkeypatch):
    monkeypatch.delenv(slurm.EARLIER_ATTEMPT_ENV, raising=False)
    assert not slurm.settles_earlier_attempt()  # a training rule: a retry
    monkeypatch.setenv(slurm.EARLIER_ATTEMPT_ENV, "settle")
    assert slurm.settles_earlier_attempt()


# ------------------------------------- the launcher and the aggregation with slurm.json
def test_launcher_records_a_cancelled_run_instead_of_rerunning(tmp_path, monkeypatch):
    fake_commands(tmp_path, monkeypatch, sacct=sacct_says("CANCELLED by 0"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DLBENCH_EARLIER_ATTEMPT", "settle")
    for key in list(os.environ):
        if key.startswith(("SLURM_", "DLBENCH_RANK", "DLBENCH_SRUN")):
            monkeypatch.delenv(key)
    coords = make_coords(scale="1x2", strategy="ddp")
    run_dir = tmp_path / coords.run_dir
    run_dir.mkdir(parents=True)
    slurm.write_record(run_dir, {"job_id": "31", "attempt": 1, "state": "running"})
    argv = [f"--{k.replace('_', '-')}={v}" for k, v in coords.as_dict().items()]
    argv += [
        "--run-dir",
        coords.run_dir,
        "--preset",
        "mlperf",
        "--warmup-steps",
        "1",
        "--measured-steps",
        "3",
        "--statistic",
        "mean",
        "--launcher",
        "srun",
    ]
    assert main(argv) == 0
    record = json.loads((run_dir / "launch.json").read_text())
    assert record["world_size"] == 2 and record["rank_exit_codes"] == [None, None]
    assert record["ranks_without_log"] == [0, 1]
    assert record["slurm_verdict"] == {"status": "cancelled", "reason": "Slurm job 31: CANCELLED by 0"}


def recorded_by_srun_launcher(root: Path, coords, slurm_record: dict) -> None:
    """slurm.json as dlbench.launch.slurm left it, then launch.json as the srun launcher writes it."""
    request = srun_request(root / coords.run_dir, coords)
    slurm.write_record(request.run_dir, slurm_record)
    write_launch_record(request, [None] * run_layout(coords).tasks, time.monotonic(), SrunLauncher(request).verdict())


def test_aggregate_marks_runs_from_slurms_record(tmp_path):
    pytest.importorskip("pandas")
    from dlbench.analysis.aggregate import summarize_run

    cancelled = make_coords(scale="1x2", strategy="ddp")
    (tmp_path / cancelled.run_dir).mkdir(parents=True)
    recorded_by_srun_launcher(tmp_path, cancelled, {"job_id": "31", "job_final": {"state": "CANCELLED by 0"}})
    row = summarize_run(cancelled, tmp_path)
    assert row["status"] == "cancelled" and row["reason"].startswith("Slurm job 31: CANCELLED by 0")

    oom = make_coords(scale="1x2", strategy="ddp", model="vgg16")
    write_run(tmp_path, oom, [[0.1, 0.1, 0.1]], rank=0, status="failed", error="gloo: connection closed by peer")
    recorded_by_srun_launcher(tmp_path, oom, {"job_id": "32", "oom_kill": True})
    assert summarize_run(oom, tmp_path)["status"] == "oom"

    fine = make_coords(model="alexnet")
    write_run(tmp_path, fine, [[0.1, 0.1, 0.1, 0.1]])
    recorded_by_srun_launcher(tmp_path, fine, {"job_id": "33", "job_final": {"state": "CANCELLED by 0"}})
    assert summarize_run(fine, tmp_path)["status"] == "ok"  # every rank finished: the numbers stand

    timed_out = make_coords(model="resnet152")
    write_run(tmp_path, timed_out, [[0.1, 0.1]], status="timeout", error="run exceeded its time limit")
    recorded_by_srun_launcher(tmp_path, timed_out, {"job_id": "34", "job_final": {"state": "CANCELLED by 0"}})
    assert summarize_run(timed_out, tmp_path)["status"] == "timeout"  # the rank's own verdict is more specific


# What runs inside every framework environment: the top-level contract modules (coordinates,
# catalogue, workload, protocol, step log, provenance, files, labels), the launch package with
# Slurm under it, and the plug-in declarations (docs/architecture.md).
CONTRACT_FOLDERS = [Path(dlbench.__file__).parent, Path(launch_package.__file__).parent, Path(slurm.__file__).parent]
CONTRACT_FOLDERS.append(CONTRACT_FOLDERS[0] / "runners")


@pytest.mark.parametrize("folder", CONTRACT_FOLDERS, ids=lambda p: p.name)
def test_contract_modules_are_stdlib_only(folder):
    modules = sorted(folder.glob("*.py"))
    assert modules
    for path in modules:
        statements = [line for line in path.read_text().splitlines() if line.startswith(("import ", "from "))]
        imported = {line.split()[1].split(".")[0].rstrip(",") for line in statements}
        assert imported <= set(sys.stdlib_module_names) | {"__future__", "dlbench"}, path


def test_a_launch_record_from_before_the_verdict_still_gets_slurms_word(tmp_path):
    """launch.json written before it carried `slurm_verdict`: the verdict comes from slurm.json."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    slurm.write_record(run_dir, {"job_id": "35", "oom_kill": True})
    (run_dir / "launch.json").write_text(json.dumps({"launcher": "srun", "rank_exit_codes": [0, 137]}))
    assert slurm_verdict(run_dir) == ("oom", "Slurm job 35: a rank was killed by the out-of-memory handler")
    (run_dir / "launch.json").write_text(json.dumps({"launcher": "srun", "slurm_verdict": None}))
    assert slurm_verdict(run_dir) == (None, "")


def test_a_requeued_job_records_how_its_earlier_run_ended(tmp_path, monkeypatch):
    """A node failure under JobRequeue: the same job id runs again; its earlier instance's
    state (sacct -D) goes with the set-aside attempt, not the running instance's."""
    requeued = """case " $* " in *" -D "*) echo "$5|NODE_FAIL|0:0|00:00:33|None";; esac
echo "$5|RUNNING|0:0|00:00:04|BeginTime\""""
    fake_commands(tmp_path, monkeypatch, sacct=requeued)
    monkeypatch.setenv("SLURM_JOB_ID", "31")
    run_dir = cancelled_run(tmp_path)
    assert slurm.previous_attempt(run_dir, world=1, settle=False) is None
    final = json.loads((run_dir / "attempt1/slurm.json").read_text())["job_final"]
    assert final["state"] == "NODE_FAIL" and final["requeued"] is True
