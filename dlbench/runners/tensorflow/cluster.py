"""The TensorFlow runner's clusters: the TF_CONFIG of multi_worker_mirrored, the
parameter_server cluster and the worker / parameter-server processes each node runs, and
`serve()`, the helper task of a node other than the coordinator's (docs/frameworks/tensorflow.md).
Stdlib only: the server processes import TensorFlow themselves."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time

from dlbench.runners import _servers

RENDEZVOUS_TIMEOUT_S = 180  # parameter_server: every server port reachable / coordinator seen


def tf_config(dist) -> dict:
    """The TF_CONFIG of this rank, computed from `spec.dist` alone (so all ranks agree).

    Assumptions: `dist.endpoints["workers"]`, if present, lists every rank's "host:port"
    in rank order (a multi-node launcher must provide it); otherwise all ranks are on one
    node and rank r listens on `master_addr:master_port + r` (the launcher's free
    `master_port` and the next world_size - 1 ports must be free).
    """
    workers = dist.endpoints.get("workers") if dist.endpoints else None
    if workers:
        workers = [str(w) for w in workers]
        if len(workers) != dist.world_size:
            raise ValueError(f"endpoints['workers'] has {len(workers)} entries for world size {dist.world_size}")
    elif dist.local_world_size == dist.world_size:
        workers = [f"{dist.master_addr}:{dist.master_port + r}" for r in range(dist.world_size)]
    else:
        raise ValueError(
            "multi_worker_mirrored across nodes needs spec.dist.endpoints['workers'] (one 'host:port' per rank)"
        )
    return {"cluster": {"worker": workers}, "task": {"type": "worker", "index": dist.rank}}


def ps_cluster(dist, devices_per_node: int) -> dict:
    """The `parameter_server` cluster, computed from `spec.dist` alone (every task agrees).

    One launcher task per node (dist.world_size = nodes). Node n (address
    `dist.endpoints["nodes"][n]`, or `master_addr` on one node) runs the workers
    n*G .. n*G+G-1 (one per device) and parameter server n; the coordinator ("chief") runs
    in task 0. Ports: chief master_port, worker w master_port+1+w, ps n master_port+1+W+n
    (distinct across nodes, so several "nodes" may share a host; Slurm's port block per job
    is 100 ports: W + nodes <= 98).
    """
    nodes = max(1, dist.world_size // max(1, dist.local_world_size))
    hosts = list((dist.endpoints or {}).get("nodes") or [])[:nodes]
    if not hosts and nodes == 1:
        hosts = [dist.master_addr]
    if len(hosts) != nodes:
        raise ValueError(f"parameter_server on {nodes} nodes needs spec.dist.endpoints['nodes'] (one address per node)")
    base, workers = dist.master_port, nodes * devices_per_node
    return {
        "chief": [f"{hosts[0]}:{base}"],
        "worker": [f"{hosts[w // devices_per_node]}:{base + 1 + w}" for w in range(workers)],
        "ps": [f"{hosts[n]}:{base + 1 + workers + n}" for n in range(nodes)],
    }


def node_index(dist) -> int:
    """The node of this task (one launcher task per node under parameter_server)."""
    return dist.rank // max(1, dist.local_world_size)


def node_servers(cluster: dict, node: int) -> list[tuple[str, int]]:
    """(job, index) of the servers node `node` runs: its workers, then its parameter server."""
    per_node = len(cluster["worker"]) // len(cluster["ps"])
    return [("worker", node * per_node + g) for g in range(per_node)] + [("ps", node)]


# A worker / PS server: guard against an orphan, then serve until killed.
_SERVER_CODE = (
    _servers.ORPHAN_GUARD
    + """
import json
conf = json.loads(sys.argv[2])
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(conf["intra"])
tf.config.threading.set_inter_op_parallelism_threads(conf["inter"])
if not conf["gpu"]:
    tf.config.set_visible_devices([], "GPU")
# The server runs the closures sent to it with its own session config (the eager threading
# settings above do not reach it): without this a worker used every core of the machine.
threads = tf.compat.v1.ConfigProto(
    intra_op_parallelism_threads=conf["intra"], inter_op_parallelism_threads=conf["inter"]
)
server = tf.distribute.Server(
    tf.train.ClusterSpec(conf["cluster"]), job_name=conf["job"], task_index=conf["index"], protocol="grpc",
    config=threads, start=True,
)
server.join()
"""
)


def start_ps_servers(spec, cluster: dict, node: int) -> list:
    """Start node `node`'s worker servers (one per device: on a GPU its own, on the CPU
    threads/G intra-op threads each) and its parameter server (CPU, 1 thread)."""
    per_node = len(cluster["worker"]) // len(cluster["ps"])
    procs = []
    for job, index in node_servers(cluster, node):
        worker = job == "worker"
        intra = max(1, spec.threads // per_node) if worker else 1
        conf = {
            "cluster": cluster,
            "job": job,
            "index": index,
            "intra": intra,
            "inter": max(2, intra),
            "gpu": worker and spec.device == "cuda",
        }
        env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
        if spec.device == "cuda":
            env["CUDA_VISIBLE_DEVICES"] = str(index % per_node) if worker else ""
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", _SERVER_CODE, str(os.getpid()), json.dumps(conf)],
                env=env,
                stdin=subprocess.DEVNULL,
            )
        )
    return procs


def _port_open(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return True
    except OSError:
        return False


def wait_for_servers(cluster: dict, procs: list, timeout_s: float = RENDEZVOUS_TIMEOUT_S) -> None:
    """Until every worker and PS server of the cluster accepts connections (bounded)."""
    deadline = time.monotonic() + timeout_s
    pending = [*cluster["worker"], *cluster["ps"]]
    while pending:
        for proc in procs:
            if proc.poll() is not None:
                raise RuntimeError(f"parameter_server: a server process exited early with code {proc.returncode}")
        pending = [a for a in pending if not _port_open(a)]
        if pending and time.monotonic() > deadline:
            raise RuntimeError(f"parameter_server: servers {pending} not reachable after {timeout_s} s")
        if pending:
            time.sleep(0.5)


def stop_processes(procs: list) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
    for proc in procs:
        with contextlib.suppress(Exception):
            proc.wait(timeout=30)


def serve(spec, time_limit_s: int = 0) -> int:
    """A helper task of `parameter_server` (a node other than the coordinator's): start this
    node's servers, wait for the coordinator to come up and to finish (its port closes),
    then stop them. Writes no step log. Exit code 0 when the coordinator finished."""
    node = node_index(spec.dist)
    cluster = ps_cluster(spec.dist, spec.coords.scale_obj.devices_per_node)
    procs = start_ps_servers(spec, cluster, node)
    chief = cluster["chief"][0]
    started = time.monotonic()
    limit = RENDEZVOUS_TIMEOUT_S + (time_limit_s or 0) + 60
    seen = False
    try:
        while True:
            for proc in procs:
                if proc.poll() is not None:
                    print(
                        f"[dlbench] parameter_server node {node}: a server exited ({proc.returncode})", file=sys.stderr
                    )
                    return 1
            up = _port_open(chief)
            if up:
                seen = True
            elif seen:
                return 0  # the coordinator has finished
            elapsed = time.monotonic() - started
            if (not seen and elapsed > RENDEZVOUS_TIMEOUT_S) or elapsed > limit:
                print(
                    f"[dlbench] parameter_server node {node}: coordinator {chief} not seen / not done", file=sys.stderr
                )
                return 1
            time.sleep(1.0)
    finally:
        stop_processes(procs)
