"""The rank's side: where an srun task sits in the run, from Slurm's environment and the
rendezvous the launcher exported. Stdlib only."""

from __future__ import annotations

import os
import socket

from dlbench.launch.slurm.hostlist import expand_hostlist, expand_tasks_per_node, parse_addresses

# Ports: each job gets a block of PORT_STRIDE ports (rank r of TensorFlow listens on
# master_port + r), chosen from the job id, below Linux's ephemeral range (32768+).
PORT_BASE = 12000
PORT_STRIDE = 100
PORT_BLOCKS = 200


def master_port(job_id: str | int) -> int:
    """A rendezvous port for this job: the same in every rank, different for neighbours."""
    return PORT_BASE + (int(job_id) % PORT_BLOCKS) * PORT_STRIDE


def job_id_from_environment(env: dict | None = None) -> str | None:
    env = os.environ if env is None else env
    return env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")


# Set to "settle" by the rule that records a run an earlier invocation's Slurm job ended
# (train.smk's record_ended_run); the training rules leave it unset.
EARLIER_ATTEMPT_ENV = "DLBENCH_EARLIER_ATTEMPT"


def settles_earlier_attempt(env: dict | None = None) -> bool:
    """What an earlier attempt left is to be recorded as Slurm ended it, not run again.

    Only record_ended_run asks for this: it is planned for the runs an earlier invocation
    left without launch.json. Evidence a training rule finds is its own invocation's earlier
    attempt (Snakemake's --retries): moved aside, and the run starts again. Telling the two
    apart by rule, not by Snakemake's attempt number, keeps that number out of every job's
    resources (a per-job callable Snakemake evaluates for each of a grid's jobs)."""
    env = os.environ if env is None else env
    return env.get(EARLIER_ATTEMPT_ENV) == "settle"


def distributed_from_environment(env: dict | None = None):
    """This srun task's place in the run, from Slurm's environment (set per task by srun)
    and the rendezvous the launcher exported. Ranks are placed in blocks (`-m block`)."""
    from dlbench.runners.base import Distributed

    env = os.environ if env is None else env
    rank = int(env["SLURM_PROCID"])
    world = int(env.get("SLURM_STEP_NUM_TASKS") or env["SLURM_NTASKS"])
    node = env.get("SLURMD_NODENAME") or socket.gethostname()
    nodelist_text = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    nodelist = expand_hostlist(nodelist_text) if nodelist_text else [node]
    per_node = _tasks_per_node(env, nodelist, world)
    node_id = int(env["SLURM_NODEID"]) if "SLURM_NODEID" in env else _node_index(nodelist, node)
    local_world = per_node[node_id] if node_id < len(per_node) else max(1, world // max(1, len(nodelist)))

    addresses = parse_addresses(env.get("DLBENCH_SLURM_NODE_ADDRS", ""))
    master_addr = env.get("DLBENCH_MASTER_ADDR") or node_address(nodelist[0], addresses)
    port = int(env.get("DLBENCH_MASTER_PORT") or master_port(job_id_from_environment(env) or "0"))
    return Distributed(
        rank=rank,
        world_size=world,
        local_rank=int(env.get("SLURM_LOCALID", 0)),
        local_world_size=local_world,
        master_addr=master_addr,
        master_port=port,
        node=node,
        endpoints=_endpoints(nodelist, per_node, addresses, world, port),
    )


def _tasks_per_node(env, nodelist: list[str], world: int) -> list[int]:
    per_node_text = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
    if per_node_text:
        per_node = expand_tasks_per_node(per_node_text)
    elif env.get("SLURM_NTASKS_PER_NODE"):
        per_node = [int(env["SLURM_NTASKS_PER_NODE"])] * len(nodelist)
    else:
        per_node = [world // max(1, len(nodelist))] * len(nodelist)
    if len(per_node) == 1 and len(nodelist) > 1:
        per_node = per_node * len(nodelist)
    return per_node


def _endpoints(nodelist: list[str], per_node: list[int], addresses: dict[str, str], world: int, port: int) -> dict:
    """Every node's address in node order (ParameterServerStrategy lays its servers out per
    node) and, with block placement, every rank's host:port (TensorFlow's
    MultiWorkerMirroredStrategy: rank r listens on master_port + r)."""
    workers = []
    for index, count in enumerate(per_node[: len(nodelist)]):
        workers += [node_address(nodelist[index], addresses)] * count
    endpoints = {"nodes": [node_address(name, addresses) for name in nodelist]}
    if len(workers) == world:
        endpoints["workers"] = [f"{host}:{port + r}" for r, host in enumerate(workers)]
    return endpoints


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
