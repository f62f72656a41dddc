"""The launcher's side inside a Slurm job: the allocation, the srun command, the ranks'
environment, and one srun step run to its end with each rank's exit status. Stdlib only.

    srun -N <nodes> -n <tasks> --ntasks-per-node=<tasks per node> -m <distribution>
         --kill-on-bad-exit=0 [--cpu-bind=<bind>] [<GPU request>] [--overlap]
         sh -c '<record exit code>' python -m dlbench.launch <the run's LaunchRequest>

docs/slurm.md explains the job's resources, the rendezvous and the records.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from dlbench.launch.request import TIME_LIMIT_GRACE_S
from dlbench.launch.slurm.environment import job_id_from_environment, master_port, node_address
from dlbench.launch.slurm.hostlist import expand_hostlist, format_addresses, parse_node_addresses
from dlbench.launch.slurm.record import EXIT_CODE_FILE, attempt_number, write_record
from dlbench.provenance import command_output
from dlbench.runners import run_layout

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

# Slurm's time limit beyond dlbench's: start-up, the launcher's grace and teardown.
RUNTIME_MARGIN_S = TIME_LIMIT_GRACE_S + 180


class SlurmError(RuntimeError):
    pass


def query(cmd: list[str], timeout: float = 30) -> str | None:
    """A Slurm command's stdout, or None (not installed, failed, timed out)."""
    return command_output(cmd, timeout)


def cpus_per_task(threads: int, tasks_per_node: int) -> int:
    """CPUs for one task: the run's threads shared by the tasks of one node (at least 1)."""
    return max(1, int(threads) // max(1, int(tasks_per_node)))


def runtime_minutes(time_limit_s: int, margin_s: int = RUNTIME_MARGIN_S, unlimited_min: int = 720) -> int:
    """Slurm's time limit for a run: dlbench's own limit (per rank) plus a margin, so that
    dlbench's fires first and writes footers. `time_limit_s` 0 (no dlbench limit) → `unlimited_min`."""
    if not time_limit_s:
        return unlimited_min
    return math.ceil((int(time_limit_s) + margin_s) / 60)


def allocation_nodes(job_id: str, env: dict | None = None) -> list[str]:
    """The job's nodes in Slurm's order. The slurm executor plugin strips SLURM_* (but the
    job id) from multi-task jobs, so ask the controller; the environment is the fallback."""
    env = os.environ if env is None else env
    out = query(["scontrol", "-o", "show", "job", str(job_id)])
    text = None
    if out:
        fields = dict(f.split("=", 1) for f in out.split() if "=" in f)
        text = fields.get("NodeList")
    text = text or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not text or text == "(null)":
        raise SlurmError(f"cannot find the nodes of Slurm job {job_id} (scontrol show job)")
    return expand_hostlist(text)


def node_addresses(names: list[str]) -> dict[str, str]:
    out = query(["scontrol", "-o", "show", "node", ",".join(names)])
    found = parse_node_addresses(out or "")
    return {name: found.get(name) or node_address(name, {}) for name in names}


def gpu_flag(gpu_request: str, gpu_type: str, nodes: int, gpus_per_node: int) -> str:
    """The GPU request as sbatch and srun take it (run.gpu_request, run.gpu_type):
    `--gpus-per-node=[type:]G`, `--gres=gpu:[type:]G` (per node) or `--gpus=[type:]N*G`."""
    typed = f"{gpu_type}:" if gpu_type else ""
    if gpu_request == "gres":
        return f"--gres=gpu:{typed}{gpus_per_node}"
    if gpu_request == "gpus":
        return f"--gpus={typed}{nodes * gpus_per_node}"
    if gpu_request == "gpus-per-node":
        return f"--gpus-per-node={typed}{gpus_per_node}"
    raise ValueError(f"run.gpu_request: {gpu_request!r} is not one of gpus-per-node, gres, gpus")


def srun_command(
    nodes: int,
    tasks_per_node: int,
    cpus: int,
    device: str,
    inner: list[str],
    overlap: bool,
    job_name: str = "dlbench",
    gpus_per_node: int | None = None,
    container_options: list[str] | tuple = (),
    knobs: dict | None = None,
) -> list[str]:
    """`gpus_per_node`: the node's devices (default: one per task); `container_options`: the
    runtime's srun options (pyxis: every task in a container, the exit-code shell included);
    `knobs`: the site's gpu_request, gpu_type, cpu_bind and distribution
    (LaunchRequest.slurm_request())."""
    gpus_per_node = tasks_per_node if gpus_per_node is None else gpus_per_node
    knobs = knobs or {}
    cmd = [
        "srun",
        f"--nodes={nodes}",
        f"--ntasks={nodes * tasks_per_node}",
        f"--ntasks-per-node={tasks_per_node}",
        f"--cpus-per-task={cpus}",
        f"--distribution={knobs.get('distribution') or 'block'}",
        "--kill-on-bad-exit=0",
        f"--job-name={job_name}",
        "--export=ALL",
    ]
    if knobs.get("cpu_bind"):
        cmd.append(f"--cpu-bind={knobs['cpu_bind']}")
    if device == "cuda":
        request = knobs.get("gpu_request") or "gpus-per-node"
        cmd.append(gpu_flag(request, knobs.get("gpu_type", ""), nodes, gpus_per_node))
    if overlap:  # already inside a step (single-task jobs are wrapped in `srun -n1` by the plugin)
        cmd.append("--overlap")
    cmd += container_options
    # sh records each rank's exit status (128+n: killed by signal n); `trap : TERM` keeps the
    # shell alive through scancel's SIGTERM long enough to write it (the rank still gets it).
    record = 'trap : TERM; "$@"; echo $? > "$DLBENCH_EXIT_DIR/rank$SLURM_PROCID.exitcode"'
    return [*cmd, "sh", "-c", record, "dlbench-rank", *inner]


def rank_environment(base: dict, master_addr: str, port: int, addresses: dict[str, str]) -> dict:
    """The environment srun starts every rank with: the batch shell's, less the outer step's
    Slurm settings and a local launcher's placement, plus the rendezvous."""
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


def launch(request, srun: list[str]) -> list[int | None]:
    """Run `srun` (srun_command) for a `LaunchRequest` inside this job, keeping slurm.json;
    returns per-task exit codes (None: no exit status recorded, e.g. the shell was killed)."""
    job_id = job_id_from_environment()
    if not job_id:
        sys.exit(
            "dlbench: --launcher srun needs a Slurm allocation (no SLURM_JOB_ID): run the pipeline "
            "with a Slurm profile (snakemake --profile slurm), or set run.launcher: local"
        )
    if shutil.which("srun") is None:
        sys.exit("dlbench: --launcher srun: no srun on PATH")
    run_dir = Path(request.run_dir)
    record = _start_record(job_id, request.coords.scale_obj, srun, attempt_number(run_dir))
    write_record(run_dir, record)
    print(f"[dlbench] Slurm job {job_id}: {' '.join(record['srun'])}", file=sys.stderr, flush=True)
    env = rank_environment(os.environ, record["master_addr"], record["master_port"], record["node_addresses"])
    env["DLBENCH_EXIT_DIR"] = str(run_dir.resolve())  # where each rank's shell leaves its exit status
    record.update(_run_step(srun, env, request.stop_after_s))
    codes = _collect_exit_codes(run_dir, run_layout(request.coords).tasks)
    record.update(state="finished", rank_exit_codes=codes)
    write_record(run_dir, record)
    return codes


def _start_record(job_id: str, scale, srun: list[str], attempt: int) -> dict:
    """slurm.json before srun starts: the job, its first `scale.nodes` nodes, the rendezvous."""
    try:
        nodes = allocation_nodes(job_id)
    except SlurmError as exc:
        sys.exit(f"dlbench: {exc}")
    if len(nodes) < scale.nodes:
        sys.exit(f"dlbench: scale {scale} needs {scale.nodes} nodes; Slurm job {job_id} has {nodes}")
    nodes = nodes[: scale.nodes]
    addresses = node_addresses(nodes)
    return {
        "job_id": job_id,
        "cluster": os.environ.get("SLURM_CLUSTER_NAME"),
        "attempt": attempt,
        "nodes": nodes,
        "node_addresses": addresses,
        "master_addr": addresses[nodes[0]],
        "master_port": int(os.environ.get("DLBENCH_SLURM_PORT") or master_port(job_id)),
        "srun": srun[: srun.index("sh")],
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "state": "running",
    }


def _run_step(srun: list[str], env: dict, stop_after_s: int | None) -> dict:
    """Run srun to its end; what slurm.json keeps of it (exit code, OOM kills, signals)."""
    signalled: list[str] = []

    def on_signal(signum, frame):  # scancel / time limit: srun and the ranks get it too
        signalled.append(signal.Signals(signum).name)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    started = time.monotonic()
    proc = subprocess.Popen(srun, env=env, stderr=subprocess.PIPE, text=True, errors="replace")
    oom_lines: list[str] = []
    reader = threading.Thread(target=_relay_stderr, args=(proc.stderr, oom_lines), daemon=True)
    reader.start()
    srun_code = _wait_srun(proc, stop_after_s)
    reader.join(timeout=5)
    for s, handler in previous.items():
        signal.signal(s, handler)
    return {
        "srun_exit_code": srun_code,
        "oom_kill": bool(oom_lines),
        "srun_errors": oom_lines[-5:],
        "signals": signalled,
        "wall_seconds": round(time.monotonic() - started, 3),
    }


def _relay_stderr(stream, oom_lines: list[str]) -> None:
    for line in stream:
        sys.stderr.write(line)
        sys.stderr.flush()
        if any(p in line for p in OOM_PATTERNS):
            oom_lines.append(line.strip())


def _wait_srun(proc: subprocess.Popen, stop_after_s: int | None) -> int | None:
    """Wait for srun; past `stop_after_s` (time limit + grace) stop it: srun forwards SIGTERM
    to every task, SIGKILL follows 30 s later."""
    while True:
        try:
            return proc.wait(timeout=stop_after_s)
        except subprocess.TimeoutExpired:
            print(
                f"[dlbench] ranks exceeded the time limit + {TIME_LIMIT_GRACE_S} s: stopping srun",
                file=sys.stderr,
                flush=True,
            )
            proc.terminate()
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
