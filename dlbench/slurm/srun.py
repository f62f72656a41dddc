"""Runs inside a Slurm allocation: `srun` one process per device, read Slurm's environment,
and keep Slurm's own account of a run (job id, nodes, OOM kills, CANCELLED/TIMEOUT).

Stdlib only: it runs inside every framework environment.

One run = one Slurm job (sized from the run's scale by workflow/rules/common.smk). In it
the launcher (`python -m dlbench.launch --launcher srun`) calls `launch()`, which runs

    srun -N <nodes> -n <tasks> --ntasks-per-node=<tasks per node> -m block
         --kill-on-bad-exit=0 [--gpus-per-node=<devices per node>] [--overlap]
         sh -c '<record exit code>' python -m dlbench.launch <same arguments>

where tasks per node comes from the strategy's layout (`dlbench.runners.layout`): one per
device (DDP, MultiWorkerMirrored, dist_sync, Horovod), or one per node (MirroredStrategy,
MXNet device/nccl kvstores, and TF ParameterServerStrategy, whose node task starts that
node's worker and PS servers and whose rank 0 is the coordinator).

with DLBENCH_SRUN=1, the rendezvous address (the first node's NodeAddr, from
`scontrol show node`) and a port derived from the job id in the environment. Each rank
finds itself with `distributed_from_environment()` (SLURM_PROCID, SLURM_NTASKS,
SLURM_LOCALID, SLURM_STEP_TASKS_PER_NODE, SLURMD_NODENAME); no hand-edited node ranks.

`slurm.json` beside the rank logs is this module's record of the run: written before
srun starts (so a job that Slurm kills as a whole still leaves its job id), completed
with per-rank exit codes and OOM kills when srun returns, and with the job's final state
(`sacct`, else `squeue`) when a later invocation settles a run that Slurm ended. The
aggregation reads it through `outcome()`.

A run that Slurm ends as a whole (scancel, time limit, node failure) fails its Snakemake
job: the launcher dies with it and cannot write launch.json. `previous_attempt()` decides
what the next attempt does with what the dead one left: Snakemake's retry of the same
invocation (attempt > 1) moves the evidence to `attempt<k>/` and runs again; the first
attempt of a later invocation records the run as Slurm ended it (no rerun), so
`snakemake --profile slurm` run a second time completes the grid and the report.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

RECORD = "slurm.json"
EXIT_CODE_FILE = "rank{rank}.exitcode"

# Ports: each job gets a block of PORT_STRIDE ports (rank r of TensorFlow listens on
# master_port + r), chosen from the job id, below Linux's ephemeral range (32768+).
PORT_BASE = 12000
PORT_STRIDE = 100
PORT_BLOCKS = 200

# Slurm job states → dlbench statuses (worst first as in dlbench.aggregate.FAILURE_ORDER).
SLURM_STATUS = {
    "OUT_OF_MEMORY": "oom",
    "TIMEOUT": "timeout",
    "DEADLINE": "timeout",
    "CANCELLED": "cancelled",
    "PREEMPTED": "cancelled",
    "NODE_FAIL": "failed",
    "BOOT_FAIL": "failed",
    "FAILED": "failed",
}
ACTIVE_STATES = {
    "PENDING",
    "RUNNING",
    "CONFIGURING",
    "COMPLETING",
    "REQUEUED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "RESIZING",
    "SIGNALING",
    "STAGE_OUT",
    "STOPPED",
    "SUSPENDED",
}
# How long a new attempt waits for an earlier job that Slurm still lists as active.
ACTIVE_WAIT_S = 60
# srun's stderr when the cgroup OOM killer struck a task of the step.
OOM_PATTERNS = ("oom-kill event", "Out Of Memory", "out-of-memory")

# Environment of the job's batch shell that must not leak into the inner srun (srun reads
# SLURM_NTASKS, SLURM_CPUS_PER_TASK, SLURM_DISTRIBUTION, ... as defaults).
KEEP_SLURM_ENV = {
    "SLURM_JOB_ID",
    "SLURM_JOBID",
    "SLURM_CONF",
    "SLURM_CLUSTER_NAME",
    "SLURM_SUBMIT_DIR",
    "SLURM_SUBMIT_HOST",
}


class SlurmError(RuntimeError):
    pass


# --------------------------------------------------------------------------- parsing
def expand_hostlist(text: str) -> list[str]:
    """Slurm's compressed host list → names: 'n[1-2],gpu[08-10,12],login' (as scontrol
    show hostnames; several bracket groups in one name are expanded left to right)."""
    names: list[str] = []
    for item in _split_top_level(text.strip()):
        if item:
            names.extend(_expand_item(item))
    return names


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in host list {text!r}")
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if depth != 0:
        raise ValueError(f"unbalanced '[' in host list {text!r}")
    parts.append("".join(current))
    return parts


def _expand_item(item: str) -> list[str]:
    match = re.match(r"^([^\[]*)\[([^\]]*)\](.*)$", item)
    if not match:
        return [item]
    prefix, ranges, rest = match.groups()
    out = []
    for part in ranges.split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            if not (lo.isdigit() and hi.isdigit()) or int(hi) < int(lo):
                raise ValueError(f"bad range {part!r} in host list item {item!r}")
            width = len(lo) if lo.startswith("0") else 0
            numbers = [str(n).zfill(width) for n in range(int(lo), int(hi) + 1)]
        elif part.isdigit():
            numbers = [part]
        else:
            raise ValueError(f"bad range {part!r} in host list item {item!r}")
        for number in numbers:
            out.extend(_expand_item(prefix + number + rest))
    return out


def expand_tasks_per_node(text: str) -> list[int]:
    """SLURM_TASKS_PER_NODE → one count per node: '2(x3),1' → [2, 2, 2, 1]."""
    counts: list[int] = []
    for part in text.strip().split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not match:
            raise ValueError(f"cannot parse tasks per node {text!r}")
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return counts


def parse_node_addresses(text: str) -> dict[str, str]:
    """`scontrol -o show node` output → {NodeName: NodeAddr}."""
    addresses = {}
    for line in text.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "NodeName" in fields:
            addresses[fields["NodeName"]] = fields.get("NodeAddr") or fields["NodeName"]
    return addresses


def format_addresses(addresses: dict[str, str]) -> str:
    return ",".join(f"{name}={addr}" for name, addr in addresses.items())


def parse_addresses(text: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in text.split(",") if "=" in item)


def master_port(job_id: str | int) -> int:
    """A rendezvous port for this job: the same in every rank, different for neighbours."""
    return PORT_BASE + (int(job_id) % PORT_BLOCKS) * PORT_STRIDE


def cpus_per_task(threads: int, tasks_per_node: int) -> int:
    """CPUs for one task: the run's threads shared by the tasks of one node (at least 1)."""
    return max(1, int(threads) // max(1, int(tasks_per_node)))


def runtime_minutes(time_limit_s: int, margin_s: int = 300, unlimited_min: int = 720) -> int:
    """Slurm's time limit for a run: dlbench's own limit (per rank) plus a margin for start-up,
    the launcher's grace (time limit + 120 s) and teardown, so that dlbench's fires first and
    writes footers. `time_limit_s` 0 (no dlbench limit) → `unlimited_min`."""
    if not time_limit_s:
        return unlimited_min
    return math.ceil((int(time_limit_s) + margin_s) / 60)


def slurm_status(state: str | None) -> str | None:
    """A Slurm job/step state ('CANCELLED by 0', 'OUT_OF_MEMORY', ...) → dlbench status."""
    if not state:
        return None
    return SLURM_STATUS.get(state.split()[0].rstrip("+"))


# ------------------------------------------------------------------ the rank's side
def distributed_from_environment(env: dict | None = None):
    """This srun task's place in the run, from Slurm's environment (set per task by srun)
    and the rendezvous the launcher exported. Ranks are placed in blocks (`-m block`)."""
    from dlbench.runners.base import Distributed

    env = os.environ if env is None else env
    rank = int(env["SLURM_PROCID"])
    world = int(env.get("SLURM_STEP_NUM_TASKS") or env["SLURM_NTASKS"])
    local_rank = int(env.get("SLURM_LOCALID", 0))
    node = env.get("SLURMD_NODENAME") or socket.gethostname()

    nodelist_text = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    nodelist = expand_hostlist(nodelist_text) if nodelist_text else [node]
    per_node_text = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
    if per_node_text:
        per_node = expand_tasks_per_node(per_node_text)
    elif env.get("SLURM_NTASKS_PER_NODE"):
        per_node = [int(env["SLURM_NTASKS_PER_NODE"])] * len(nodelist)
    else:
        per_node = [world // max(1, len(nodelist))] * len(nodelist)
    if len(per_node) == 1 and len(nodelist) > 1:
        per_node = per_node * len(nodelist)
    node_id = int(env["SLURM_NODEID"]) if "SLURM_NODEID" in env else _node_index(nodelist, node)
    local_world = per_node[node_id] if node_id < len(per_node) else max(1, world // max(1, len(nodelist)))

    addresses = parse_addresses(env.get("DLBENCH_SLURM_NODE_ADDRS", ""))
    master_addr = env.get("DLBENCH_MASTER_ADDR") or node_address(nodelist[0], addresses)
    job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or "0"
    port = int(env.get("DLBENCH_MASTER_PORT") or master_port(job_id))

    # Every rank's host:port (block placement), for strategies that need all of them
    # (TensorFlow's MultiWorkerMirroredStrategy: rank r listens on master_port + r), and
    # every node's address in node order (ParameterServerStrategy lays its servers out per node).
    workers = []
    for index, count in enumerate(per_node[: len(nodelist)]):
        workers += [node_address(nodelist[index], addresses)] * count
    endpoints = {"nodes": [node_address(name, addresses) for name in nodelist]}
    if len(workers) == world:
        endpoints["workers"] = [f"{host}:{port + r}" for r, host in enumerate(workers)]
    return Distributed(
        rank=rank,
        world_size=world,
        local_rank=local_rank,
        local_world_size=local_world,
        master_addr=master_addr,
        master_port=port,
        node=node,
        endpoints=endpoints,
    )


def _node_index(nodelist: list[str], node: str) -> int:
    return nodelist.index(node) if node in nodelist else 0


def node_address(name: str, addresses: dict[str, str]) -> str:
    """A node's address: the launcher's NodeAddr map, else the name if it resolves, else
    the loopback address (single-host test clusters whose node names do not resolve)."""
    if name in addresses:
        return addresses[name]
    try:
        socket.getaddrinfo(name, None)
        return name
    except OSError:
        return "127.0.0.1"


# -------------------------------------------------------------- the launcher's side
def _run(cmd: list[str], timeout: float = 30) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def job_id_from_environment(env: dict | None = None) -> str | None:
    env = os.environ if env is None else env
    return env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")


def allocation_nodes(job_id: str, env: dict | None = None) -> list[str]:
    """The job's nodes in Slurm's order. The slurm executor plugin strips SLURM_* (but the
    job id) from multi-task jobs, so ask the controller; the environment is the fallback."""
    env = os.environ if env is None else env
    out = _run(["scontrol", "-o", "show", "job", str(job_id)])
    text = None
    if out:
        fields = dict(f.split("=", 1) for f in out.split() if "=" in f)
        text = fields.get("NodeList")
    text = text or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not text or text == "(null)":
        raise SlurmError(f"cannot find the nodes of Slurm job {job_id} (scontrol show job)")
    return expand_hostlist(text)


def node_addresses(names: list[str]) -> dict[str, str]:
    out = _run(["scontrol", "-o", "show", "node", ",".join(names)])
    found = parse_node_addresses(out or "")
    return {name: found.get(name) or node_address(name, {}) for name in names}


def srun_command(
    nodes: int,
    tasks_per_node: int,
    cpus: int,
    device: str,
    inner: list[str],
    overlap: bool,
    job_name: str = "dlbench",
    gpus_per_node: int | None = None,
) -> list[str]:
    """`gpus_per_node`: the node's devices (default: one per task)."""
    gpus_per_node = tasks_per_node if gpus_per_node is None else gpus_per_node
    cmd = [
        "srun",
        f"--nodes={nodes}",
        f"--ntasks={nodes * tasks_per_node}",
        f"--ntasks-per-node={tasks_per_node}",
        f"--cpus-per-task={cpus}",
        "--distribution=block",
        "--kill-on-bad-exit=0",
        f"--job-name={job_name}",
        "--export=ALL",
    ]
    if device == "cuda":
        cmd.append(f"--gpus-per-node={gpus_per_node}")
    if overlap:  # already inside a step (single-task jobs are wrapped in `srun -n1` by the plugin)
        cmd.append("--overlap")
    # sh records each rank's exit status (128+n: killed by signal n); `trap : TERM` keeps the
    # shell alive through scancel's SIGTERM long enough to write it (the rank still gets it).
    record = 'trap : TERM; "$@"; echo $? > "$DLBENCH_EXIT_DIR/rank$SLURM_PROCID.exitcode"'
    return [*cmd, "sh", "-c", record, "dlbench-rank", *inner]


def rank_environment(base: dict, master_addr: str, port: int, addresses: dict[str, str]) -> dict:
    env = {
        k: v for k, v in base.items() if not (k.startswith(("SLURM_", "SRUN_", "SBATCH_")) and k not in KEEP_SLURM_ENV)
    }
    env.update(
        DLBENCH_SRUN="1",
        DLBENCH_MASTER_ADDR=master_addr,
        DLBENCH_MASTER_PORT=str(port),
        DLBENCH_SLURM_NODE_ADDRS=format_addresses(addresses),
    )
    for key in ("DLBENCH_RANK", "DLBENCH_WORLD_SIZE", "DLBENCH_LOCAL_RANK", "DLBENCH_LOCAL_WORLD_SIZE"):
        env.pop(key, None)
    return env


def read_record(run_dir: str | os.PathLike) -> dict | None:
    path = Path(run_dir) / RECORD
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def write_record(run_dir: str | os.PathLike, record: dict) -> None:
    path = Path(run_dir) / RECORD
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(tmp, path)


def launch(args: argparse.Namespace, argv: list[str]) -> list[int | None]:
    """Start the run's tasks (its layout's tasks per node) with srun inside this job;
    returns per-task exit codes (None: no exit status recorded, e.g. the shell was killed)."""
    from dlbench.coords import RunCoords

    job_id = job_id_from_environment()
    if not job_id:
        sys.exit(
            "dlbench: --launcher srun needs a Slurm allocation (no SLURM_JOB_ID): run the pipeline "
            "with a Slurm profile (snakemake --profile slurm), or set run.launcher: local"
        )
    if shutil.which("srun") is None:
        sys.exit("dlbench: --launcher srun: no srun on PATH")
    coords = RunCoords.from_dict({name: getattr(args, name) for name in RunCoords.__dataclass_fields__})
    scale = coords.scale_obj
    run_dir = Path(args.run_dir)
    try:
        nodes = allocation_nodes(job_id)
    except SlurmError as exc:
        sys.exit(f"dlbench: {exc}")
    if len(nodes) < scale.nodes:
        sys.exit(f"dlbench: scale {scale} needs {scale.nodes} nodes; Slurm job {job_id} has {nodes}")
    nodes = nodes[: scale.nodes]
    addresses = node_addresses(nodes)
    port = int(os.environ.get("DLBENCH_SLURM_PORT") or master_port(job_id))
    tasks_per_node = coords.layout.tasks_per_node
    cpus = cpus_per_task(args.threads, tasks_per_node)
    inner = [sys.executable, "-m", "dlbench.launch", *argv]
    cmd = srun_command(
        scale.nodes,
        tasks_per_node,
        cpus,
        args.device,
        inner,
        overlap="SLURM_STEP_ID" in os.environ,
        job_name=f"dlbench-{coords.framework}-{coords.scale}",
        gpus_per_node=scale.devices_per_node,
    )
    record = {
        "job_id": job_id,
        "cluster": os.environ.get("SLURM_CLUSTER_NAME"),
        "attempt": snakemake_attempt(),
        "nodes": nodes,
        "node_addresses": addresses,
        "master_addr": addresses[nodes[0]],
        "master_port": port,
        "srun": cmd[: cmd.index("sh")],
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "state": "running",
    }
    write_record(run_dir, record)
    print(f"[dlbench] Slurm job {job_id}: {' '.join(record['srun'])}", file=sys.stderr, flush=True)

    signalled: list[str] = []

    def on_signal(signum, frame):  # scancel / time limit: srun and the ranks get it too
        signalled.append(signal.Signals(signum).name)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    env = rank_environment(os.environ, record["master_addr"], port, addresses)
    env["DLBENCH_EXIT_DIR"] = str(run_dir.resolve())  # where each rank's shell leaves its exit status
    started = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True, errors="replace")
    oom_lines: list[str] = []
    reader = threading.Thread(target=_relay_stderr, args=(proc.stderr, oom_lines), daemon=True)
    reader.start()
    srun_code = _wait_srun(proc, args.time_limit)
    reader.join(timeout=5)
    for s, handler in previous.items():
        signal.signal(s, handler)

    codes = _collect_exit_codes(run_dir, coords.tasks)
    record.update(
        state="finished",
        srun_exit_code=srun_code,
        rank_exit_codes=codes,
        oom_kill=bool(oom_lines),
        srun_errors=oom_lines[-5:],
        signals=signalled,
        wall_seconds=round(time.monotonic() - started, 3),
    )
    write_record(run_dir, record)
    return codes


def _relay_stderr(stream, oom_lines: list[str]) -> None:
    for line in stream:
        sys.stderr.write(line)
        sys.stderr.flush()
        if any(p in line for p in OOM_PATTERNS):
            oom_lines.append(line.strip())


def _wait_srun(proc: subprocess.Popen, time_limit: int) -> int | None:
    """Wait for srun; ranks enforce their own time limit, this bound catches a rank stuck
    in a collective (as the local launcher does)."""
    timeout = time_limit + 120 if time_limit else None
    while True:
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            print("[dlbench] ranks exceeded the time limit + 120 s: stopping srun", file=sys.stderr, flush=True)
            proc.terminate()  # srun forwards SIGTERM to every task
            try:
                return proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                return None
        except InterruptedError:  # pragma: no cover - PEP 475 retries wait() itself
            continue


def _collect_exit_codes(run_dir: Path, world: int) -> list[int | None]:
    codes: list[int | None] = []
    for rank in range(world):
        path = run_dir / EXIT_CODE_FILE.format(rank=rank)
        try:
            codes.append(int(path.read_text().strip()))
            path.unlink()
        except (OSError, ValueError):
            codes.append(None)
    return codes


# ------------------------------------------------------- after Slurm ended a run
def job_state(job_id: str) -> dict:
    """Slurm's account of a job: sacct (accounting) if it answers, else squeue (jobs stay
    there MinJobAge seconds after they end). {"state": None} when neither knows it."""
    out = _run(["sacct", "-X", "-n", "-P", "-j", str(job_id), "-o", "JobIDRaw,State,ExitCode,Elapsed,Reason"])
    if out:
        for line in out.splitlines():
            fields = line.split("|")
            if fields and fields[0] == str(job_id) and len(fields) >= 3:
                return {
                    "state": fields[1],
                    "exit_code": fields[2],
                    "elapsed": fields[3] if len(fields) > 3 else None,
                    "reason": fields[4] if len(fields) > 4 else None,
                    "source": "sacct",
                }
    out = _run(["squeue", "-h", "-t", "all", "-j", str(job_id), "-o", "%i|%T|%r"])
    if out:
        for line in out.splitlines():
            fields = line.split("|")
            if fields and fields[0] == str(job_id) and len(fields) >= 2:
                return {"state": fields[1], "reason": fields[2] if len(fields) > 2 else None, "source": "squeue"}
    return {"state": None, "source": None}


def _active(state: dict) -> bool:
    return (state.get("state") or "").split(" ")[0] in ACTIVE_STATES


def _job_id_from_rank_logs(run_dir: Path) -> str | None:
    for path in sorted(run_dir.glob("rank*.steps.jsonl")):
        try:
            with open(path, encoding="utf-8") as f:
                header = json.loads(f.readline())
        except (OSError, ValueError):
            continue
        slurm = (header.get("provenance") or {}).get("slurm") or {}
        if slurm.get("slurm_job_id"):
            return str(slurm["slurm_job_id"])
    return None


def _evidence(run_dir: Path) -> list[Path]:
    return [
        *sorted(run_dir.glob("rank*.steps.jsonl")),
        *sorted(run_dir.glob("rank*.exitcode")),
        *([run_dir / RECORD] if (run_dir / RECORD).exists() else []),
    ]


def unsettled(run_dir: str | os.PathLike) -> bool:
    """A run that an earlier attempt started (slurm.json or rank logs) and that has no
    launch.json: Slurm ended its job before the launcher could write it."""
    run_dir = Path(run_dir)
    return not (run_dir / "launch.json").exists() and bool(_evidence(run_dir))


def snakemake_attempt(env: dict | None = None) -> int:
    """Snakemake's attempt number of this job (1, then 2.. on --retries), from the rule's
    shell line (DLBENCH_ATTEMPT={resources.dlbench_attempt})."""
    env = os.environ if env is None else env
    try:
        return max(1, int(env.get("DLBENCH_ATTEMPT", "1")))
    except ValueError:
        return 1


def previous_attempt(run_dir: str | os.PathLike, world: int, attempt: int | None = None) -> list[int | None] | None:
    """What to do with what an earlier attempt of this run left (launch.json missing).

    Returns None: start the run (nothing there, or Snakemake's retry — attempt > 1 — and
    the earlier attempt's files have been moved to `attempt<k>/`). Returns rank exit codes:
    do not run again, the run is recorded as Slurm ended it (the caller writes launch.json).
    Exits with a message if the earlier job is still active.
    """
    run_dir = Path(run_dir)
    attempt = snakemake_attempt() if attempt is None else attempt
    evidence = _evidence(run_dir)
    if not evidence:
        return None
    record = read_record(run_dir) or {}
    job_id = record.get("job_id") or _job_id_from_rank_logs(run_dir)
    state = job_state(job_id) if job_id else {"state": None, "source": None}
    deadline = time.monotonic() + ACTIVE_WAIT_S  # accounting can lag behind the controller
    while _active(state) and job_id != job_id_from_environment() and time.monotonic() < deadline:
        time.sleep(5)
        state = job_state(job_id)
    if _active(state) and job_id != job_id_from_environment():
        sys.exit(
            f"dlbench: {run_dir}: the earlier attempt, Slurm job {job_id}, is still {state['state']}; "
            "wait for it to end (or scancel it), then run again"
        )
    if attempt > 1:
        previous = int(record.get("attempt") or attempt - 1)
        target = run_dir / f"attempt{previous}"
        while target.exists():
            previous += 1
            target = run_dir / f"attempt{previous}"
        target.mkdir()
        record.setdefault("job_id", job_id)
        record["job_final"] = state
        write_record(run_dir, record)
        for path in _evidence(run_dir):
            os.replace(path, target / path.name)
        print(f"[dlbench] retry {attempt}: the earlier attempt's files are in {target}", file=sys.stderr)
        return None
    record.setdefault("job_id", job_id)
    record.update(state="settled", job_final=state, settled=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    write_record(run_dir, record)
    print(
        f"[dlbench] {run_dir}: recorded as Slurm ended it (job {job_id}: {state.get('state')}); "
        "move the directory away to run this cell again",
        file=sys.stderr,
    )
    codes = record.get("rank_exit_codes")
    return codes if isinstance(codes, list) and len(codes) == world else [None] * world


def outcome(run_dir: str | os.PathLike) -> tuple[str | None, str]:
    """Slurm's word on a run whose rank logs do not say 'ok': (dlbench status, reason), or
    (None, '') when Slurm has nothing to add (no slurm.json, or the job ended normally)."""
    record = read_record(run_dir)
    if not record:
        return None, ""
    job = f"Slurm job {record.get('job_id', '?')}"
    final = record.get("job_final") or {}
    status = slurm_status(final.get("state"))
    if status:
        reason = final.get("reason")
        detail = f" ({reason})" if reason and reason not in ("None", "(null)") else ""
        return status, f"{job}: {final['state']}{detail}"
    if record.get("oom_kill"):
        return "oom", f"{job}: a rank was killed by the out-of-memory handler"
    return None, ""
